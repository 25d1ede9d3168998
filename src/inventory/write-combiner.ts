/**
 * Flat combining for a write that needs no lock of ours: calls that arrive while a statement of this instance is
 * running wait for the next one, which serves them all. Nobody waits for a batch to fill: a lone call runs at once,
 * and under load one commit (one WAL flush) serves every call that queued behind the previous one. The order path
 * batches its orders the same way under their segment locks (OrderBatcher); confirms use this one.
 */
export class WriteCombiner<In, Out> {
  private waiting: { input: In; resolve: (out: Out) => void; reject: (error: unknown) => void }[] = [];
  private running = false;

  constructor(
    /** Writes a batch; answers each input, in order. */
    private readonly write: (inputs: In[]) => Promise<Out[]>,
    private readonly maxBatch: number,
  ) {}

  run(input: In): Promise<Out> {
    return new Promise<Out>((resolve, reject) => {
      this.waiting.push({ input, resolve, reject });
      if (!this.running) void this.drain();
    });
  }

  private async drain(): Promise<void> {
    this.running = true;
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
    this.running = false;
  }
}
