/**
 * Flat combining: calls that arrive while `lanes` statements of this instance are running wait for the next one, which
 * serves them all. Nobody waits for a batch to fill: a lone call runs at once, and under load one statement (one round
 * trip; for a write, one WAL flush) serves every call that queued behind the previous ones. Confirms use it, the order
 * batches' writes (BatchWriter, each batch already combined under its segment locks by OrderBatcher), the joins of a
 * line and the reads of its tickets' status.
 */
export class StatementCombiner<In, Out> {
  private waiting: { input: In; resolve: (out: Out) => void; reject: (error: unknown) => void }[] = [];
  private running = 0;

  constructor(
    /** Runs a batch; answers each input, in order. */
    private readonly write: (inputs: In[]) => Promise<Out[]>,
    private readonly maxBatch: number,
    /** Statements that may run at once before calls wait to be combined. */
    private readonly lanes = 1,
  ) {}

  run(input: In): Promise<Out> {
    return new Promise<Out>((resolve, reject) => {
      this.waiting.push({ input, resolve, reject });
      if (this.running < this.lanes) void this.drain();
    });
  }

  private async drain(): Promise<void> {
    this.running++;
    while (this.waiting.length > 0) {
      const batch = this.waiting.splice(0, this.maxBatch);
      try {
        const outs = await this.write(batch.map((call) => call.input));
        batch.forEach((call, i) => call.resolve(outs[i]!));
      } catch (error) {
        // The statement failed as a whole (Postgres away): every call of the batch fails the same way.
        for (const call of batch) call.reject(error);
      }
    }
    this.running--;
  }
}
