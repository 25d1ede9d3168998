/**
 * Sum of a Prometheus counter over all its label sets, scraped from `GET /metrics` of each instance. Undefined when
 * no instance exposes it: the fault cases print it as evidence, they do not depend on it. `token`: the instances'
 * metrics or admin token, when they have one.
 */
export async function scrapeCounter(urls: string[], name: string, token?: string): Promise<number | undefined> {
  let total: number | undefined;
  const headers: Record<string, string> = token ? { authorization: `Bearer ${token}` } : {};
  for (const url of urls) {
    try {
      const response = await fetch(`${url}/metrics`, { headers, signal: AbortSignal.timeout(5_000) });
      if (!response.ok) continue;
      for (const line of (await response.text()).split('\n')) {
        const match = new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)$`).exec(line);
        if (match) total = (total ?? 0) + Number(match[1]);
      }
    } catch {
      // An instance that does not answer adds nothing.
    }
  }
  return total;
}
