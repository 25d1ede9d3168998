/**
 * A background job (the events' sequencer, deliveries and retention, the books audit, the expiry sweep, the lines'
 * admission passes, the fleet's series): run every `intervalMs` (and on demand), never two runs at once — a tick that finds
 * one under way is skipped — with a failed run handed to `onError` and tried again at the next tick. `stop` waits for
 * the run under way.
 */
export class PeriodicJob {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;

  constructor(
    private readonly intervalMs: number,
    private readonly job: () => Promise<unknown>,
    private readonly onError: (error: Error) => void,
  ) {}

  start(): void {
    this.timer = setInterval(() => this.runNow(), this.intervalMs);
    this.timer.unref();
  }

  /** Runs the job now, unless a run is under way. */
  runNow(): void {
    this.running ??= this.job()
      .then(
        () => undefined,
        (error: unknown) => this.onError(error as Error),
      )
      .finally(() => (this.running = undefined));
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.running;
  }
}
