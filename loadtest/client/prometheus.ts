type Sample = { labels: Record<string, string>; value: number };

/** A scrape of a Prometheus text endpoint, reduced to what the load test reads: samples by name and labels. */
export class MetricsSnapshot {
  private constructor(private readonly samples: Map<string, Sample[]>) {}

  static parse(text: string): MetricsSnapshot {
    const samples = new Map<string, Sample[]>();
    for (const line of text.split('\n')) {
      const match = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)/.exec(line);
      if (!match) continue;
      const labels: Record<string, string> = {};
      for (const pair of (match[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[pair[1]!] = pair[2]!;
      samples.set(match[1]!, [...(samples.get(match[1]!) ?? []), { labels, value: Number(match[3]) }]);
    }
    return new MetricsSnapshot(samples);
  }

  /** Retries: right after a round the target may still be closing sockets. `token` guards GET /metrics, if set. */
  static async scrape(url: string, token?: string, attempts = 3): Promise<MetricsSnapshot> {
    for (let attempt = 1; ; attempt++) {
      try {
        const response = await fetch(url, { headers: token ? { authorization: `Bearer ${token}` } : {} });
        if (!response.ok) throw new Error(`GET ${url}: ${response.status}`);
        return MetricsSnapshot.parse(await response.text());
      } catch (error) {
        if (attempt >= attempts) throw new Error(`GET ${url} failed: ${(error as Error).message}`, { cause: error });
        await new Promise((resolve) => setTimeout(resolve, 200 * attempt));
      }
    }
  }

  /** Σ of the samples of `name`. */
  sum(name: string): number {
    return (this.samples.get(name) ?? []).reduce((total, s) => total + s.value, 0);
  }

  /** Values of one label across the samples of `name`, with their sums. */
  byLabel(name: string, label: string): Record<string, number> {
    const out: Record<string, number> = {};
    for (const { labels, value } of this.samples.get(name) ?? []) {
      if (labels[label] !== undefined) out[labels[label]] = (out[labels[label]] ?? 0) + value;
    }
    return out;
  }
}

/** Change of a histogram between two scrapes: its mean, and the bucket bound that holds a quantile. */
export function histogramDelta(before: MetricsSnapshot, after: MetricsSnapshot, name: string) {
  const earlier = before.byLabel(`${name}_bucket`, 'le');
  const buckets = Object.entries(after.byLabel(`${name}_bucket`, 'le'))
    .map(([le, count]) => [le === '+Inf' ? Infinity : Number(le), count - (earlier[le] ?? 0)] as const)
    .sort((x, y) => x[0] - y[0]);
  const count = after.sum(`${name}_count`) - before.sum(`${name}_count`);
  const sum = after.sum(`${name}_sum`) - before.sum(`${name}_sum`);
  return {
    sum,
    mean: count > 0 ? sum / count : 0,
    /** Upper bound of the bucket holding quantile `q`: a conservative estimate. */
    quantileUpperBound: (q: number) => buckets.find(([, n]) => n >= q * count)?.[0] ?? Infinity,
  };
}
