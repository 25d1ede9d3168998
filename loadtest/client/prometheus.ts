/** A scrape of a Prometheus text endpoint, reduced to what the load test reads: samples by name and labels. */
export class MetricsSnapshot {
  private constructor(private readonly samples: Map<string, { labels: Record<string, string>; value: number }[]>) {}

  static parse(text: string): MetricsSnapshot {
    const samples = new Map<string, { labels: Record<string, string>; value: number }[]>();
    for (const line of text.split('\n')) {
      if (!line || line.startsWith('#')) continue;
      const match = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)/.exec(line);
      if (!match) continue;
      const [, name, labelText, value] = match;
      const labels: Record<string, string> = {};
      for (const pair of (labelText ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[pair[1]!] = pair[2]!;
      const list = samples.get(name!) ?? [];
      list.push({ labels, value: Number(value) });
      samples.set(name!, list);
    }
    return new MetricsSnapshot(samples);
  }

  /**
   * Retries a failed connection a few times: right after a round the target may still be closing sockets. `token`
   * is the service's metrics or admin token, when it has one (GET /metrics then needs it).
   */
  static async scrape(url: string, token?: string, attempts = 3): Promise<MetricsSnapshot> {
    const headers: Record<string, string> = token ? { authorization: `Bearer ${token}` } : {};
    for (let attempt = 1; ; attempt++) {
      try {
        const response = await fetch(url, { headers });
        if (!response.ok) throw new Error(`GET ${url}: ${response.status}`);
        return MetricsSnapshot.parse(await response.text());
      } catch (error) {
        if (attempt >= attempts) {
          const cause = (error as { cause?: { message?: string } }).cause?.message;
          throw new Error(`GET ${url} failed: ${(error as Error).message}${cause ? ` (${cause})` : ''}`, {
            cause: error,
          });
        }
        await new Promise((resolve) => setTimeout(resolve, 200 * attempt));
      }
    }
  }

  /** Σ of the samples of `name` whose labels include `where`. */
  sum(name: string, where: Record<string, string> = {}): number {
    let total = 0;
    for (const sample of this.samples.get(name) ?? []) {
      if (Object.entries(where).every(([k, v]) => sample.labels[k] === v)) total += sample.value;
    }
    return total;
  }

  /** Values of one label across the samples of `name`, with their sums. */
  byLabel(name: string, label: string): Record<string, number> {
    const out: Record<string, number> = {};
    for (const sample of this.samples.get(name) ?? []) {
      const key = sample.labels[label];
      if (key !== undefined) out[key] = (out[key] ?? 0) + sample.value;
    }
    return out;
  }

  /** Cumulative histogram buckets of `name` (upper bound → count). */
  buckets(name: string): Map<number, number> {
    const out = new Map<number, number>();
    for (const sample of this.samples.get(`${name}_bucket`) ?? []) {
      const le = sample.labels.le === '+Inf' ? Infinity : Number(sample.labels.le);
      out.set(le, (out.get(le) ?? 0) + sample.value);
    }
    return out;
  }
}

/** Change of a histogram between two scrapes, with the estimates the report needs. */
export class HistogramDelta {
  constructor(
    readonly count: number,
    readonly sum: number,
    private readonly buckets: [number, number][],
  ) {}

  static between(before: MetricsSnapshot, after: MetricsSnapshot, name: string): HistogramDelta {
    const b = before.buckets(name);
    const buckets = [...after.buckets(name)]
      .map(([le, count]): [number, number] => [le, count - (b.get(le) ?? 0)])
      .sort((x, y) => x[0] - y[0]);
    return new HistogramDelta(
      after.sum(`${name}_count`) - before.sum(`${name}_count`),
      after.sum(`${name}_sum`) - before.sum(`${name}_sum`),
      buckets,
    );
  }

  get mean(): number {
    return this.count > 0 ? this.sum / this.count : 0;
  }

  /** Upper bound of the bucket holding quantile `q` (a conservative estimate). */
  quantileUpperBound(q: number): number {
    const rank = q * this.count;
    for (const [le, count] of this.buckets) if (count >= rank) return le;
    return Infinity;
  }

  /** Share of observations at or below `bound` (must be a bucket bound). */
  shareAtMost(bound: number): number {
    const bucket = this.buckets.find(([le]) => le === bound);
    return this.count > 0 && bucket ? bucket[1] / this.count : 0;
  }
}
