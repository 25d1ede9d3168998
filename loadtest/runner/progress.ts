import cliProgress from 'cli-progress';

/** Progress while the run goes: a bar per round on a terminal, one line per round elsewhere (CI logs, files). */
export class RunProgress {
  private readonly started = Date.now();

  note(message: string): void {
    const seconds = Math.round((Date.now() - this.started) / 1000);
    const clock = `${String(Math.floor(seconds / 60)).padStart(2, '0')}:${String(seconds % 60).padStart(2, '0')}`;
    process.stderr.write(`[${clock}] ${message}\n`);
  }

  /** A round of `total` requests, or (timed) of `total` tenths of a second. */
  round(title: string, total: number, timed: boolean) {
    const unit = timed ? 'tenths of a second' : 'requests';
    if (!process.stderr.isTTY) {
      this.note(`${title}: ${total} ${unit}…`);
      return {
        update: (_value: number, _status?: string) => {},
        done: (summary: string) => this.note(`${title}: ${summary}`),
      };
    }
    const bar = new cliProgress.SingleBar(
      {
        format: `  {title} |{bar}| {value}/{total} ${unit} | {status}`,
        hideCursor: true,
        clearOnComplete: true,
        stream: process.stderr,
      },
      cliProgress.Presets.shades_classic,
    );
    bar.start(total, 0, { title, status: '' });
    return {
      update: (value: number, status = '') => bar.update(Math.min(Math.round(value), total), { status }),
      done: (summary: string) => {
        bar.stop();
        this.note(`${title}: ${summary}`);
      },
    };
  }
}
