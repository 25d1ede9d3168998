/** Prometheus text as the tests and the load test read it: a scrape's samples, and sums over them. */

/**
 * Sum of a Prometheus counter over all its label sets, scraped from `GET /metrics` of each instance. Undefined when
 * no instance exposes it: the fault cases print it as evidence, they do not depend on it. `token`: the instances'
 * metrics or admin token, when they have one.
 */
export async function scrapeCounter(urls: string[], name: string, token?: string): Promise<number | undefined> {
  let total: number | undefined;
  for (const url of urls) {
    // An instance that does not answer adds nothing.
    const scraped = await MetricsSnapshot.scrape(`${url}/metrics`, token, 1).catch(() => undefined);
    if (scraped?.has(name)) total = (total ?? 0) + scraped.sum(name);
  }
  return total;
}

type Sample = { name: string; labels: Record<string, string>; value: number };
const SAMPLE = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)/gm;
/** A label value may hold commas and escaped quotes (`\"`): each label is read whole, once per scrape. */
const LABEL = /(\w+)="((?:[^"\\]|\\.)*)"/g;
const labelsOf = (text = '') => Object.fromEntries([...text.matchAll(LABEL)].map(([, key, value]) => [key, value]));

/** A scrape of a Prometheus text endpoint: each sample's name, labels and value. */
export class MetricsSnapshot {
  private constructor(private readonly samples: Sample[]) {}

  /** Retries: right after a round the target may still be closing sockets. `token` guards GET /metrics, if set. */
  static async scrape(url: string, token?: string, attempts = 3): Promise<MetricsSnapshot> {
    const headers: Record<string, string> = token ? { authorization: `Bearer ${token}` } : {};
    for (let attempt = 1; ; attempt++) {
      try {
        const response = await fetch(url, { headers, signal: AbortSignal.timeout(5_000) });
        if (!response.ok) throw new Error(`GET ${url}: ${response.status}`);
        const samples = [...(await response.text()).matchAll(SAMPLE)];
        return new MetricsSnapshot(
          samples.map(([, name, labels, value]) => ({ name: name!, labels: labelsOf(labels), value: Number(value) })),
        );
      } catch (error) {
        if (attempt >= attempts) throw new Error(`GET ${url} failed: ${(error as Error).message}`, { cause: error });
        await new Promise((resolve) => setTimeout(resolve, 200 * attempt));
      }
    }
  }

  /** Whether the scrape holds any sample of `name`. */
  has(name: string): boolean {
    return this.samples.some((s) => s.name === name);
  }

  /** Σ of the samples of `name`. */
  sum(name: string): number {
    return this.samples.reduce((total, s) => total + (s.name === name ? s.value : 0), 0);
  }

  /** Σ of the samples of `name` by the value of one of their labels. */
  byLabel(name: string, label: string): Record<string, number> {
    const out: Record<string, number> = {};
    for (const s of this.samples) {
      const value = s.name === name ? s.labels[label] : undefined;
      if (value !== undefined) out[value] = (out[value] ?? 0) + s.value;
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
  /** Upper bound of the bucket holding quantile `q`: a conservative estimate. */
  const quantileUpperBound = (q: number) => buckets.find(([, n]) => n >= q * count)?.[0] ?? Infinity;
  return { sum, mean: count > 0 ? sum / count : 0, quantileUpperBound };
}
