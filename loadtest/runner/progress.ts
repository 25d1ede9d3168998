import cliProgress from 'cli-progress';

/**
 * Progress while the run goes: a bar per round on a terminal, one line per round elsewhere (CI logs, files).
 */
export class RunProgress {
  private readonly interactive = Boolean(process.stderr.isTTY);
  private readonly started = Date.now();

  note(message: string): void {
    process.stderr.write(`[${this.elapsed()}] ${message}\n`);
  }

  round(title: string, total: number, unit: string): RoundProgress {
    if (!this.interactive) {
      this.note(`${title}: ${total} ${unit}…`);
      return { update: () => {}, done: (summary) => this.note(`${title}: ${summary}`) };
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
    let last = 0;
    return {
      update: (value, status = '') => {
        const now = Date.now();
        if (now - last < 100 && value < total) return;
        last = now;
        bar.update(Math.min(value, total), { status });
      },
      done: (summary) => {
        bar.stop();
        this.note(`${title}: ${summary}`);
      },
    };
  }

  private elapsed(): string {
    const seconds = Math.round((Date.now() - this.started) / 1000);
    return `${String(Math.floor(seconds / 60)).padStart(2, '0')}:${String(seconds % 60).padStart(2, '0')}`;
  }
}

export interface RoundProgress {
  update(value: number, status?: string): void;
  done(summary: string): void;
}
