import autocannon from 'autocannon';
import type { RunProgress } from './progress.js';

export interface RoundSpec {
  title: string;
  baseUrl: string;
  /** POST (default), with `body` as JSON; or GET. */
  method?: 'GET' | 'POST';
  path: string;
  body: unknown;
  headers?: Record<string, string>;
  /**
   * Each connection confirms the order its last answer placed (`POST /orders/<id>/confirm`) with its next request, so
   * the round alternates placing a reservation and confirming it: the checkout a shop runs.
   */
  confirmEach?: boolean;
  /**
   * Spread traffic: each request's SKU is chosen by this function (the body's `sku` is replaced), and the units of
   * its 201 answers are counted per SKU (`answeredBySku`), so the books of every SKU can be exact.
   */
  pickSku?: () => string;
  connections: number;
  /** Warm-up rounds run for a time... */
  durationSeconds?: number;
  /** ...measured rounds send a fixed number of requests, so every answer is counted and the books can be exact. */
  amount?: number;
  timeoutSeconds: number;
}

export interface LatencySummary {
  p50: number;
  p97_5: number;
  p99: number;
  max: number;
  mean: number;
}

export interface RoundResult {
  title: string;
  /** The options given to autocannon, and the same as command-line flags. */
  autocannon: { options: Record<string, unknown>; flags: string };
  responses: number;
  errors: number;
  timeouts: number;
  statusCounts: Record<string, number>;
  durationSeconds: number;
  /**
   * The window the rates are computed over: from the start until the first connection sent its last request, while
   * all connections were busy (the tail, with fewer connections, would understate what the target sustains).
   */
  steadySeconds: number;
  /** Answers per second within the steady window, by status. */
  ratePerSecond: Record<string, number>;
  /** Latency of every answer, in milliseconds. */
  latencyMs: LatencySummary;
  /** Latency of answers with the round's expected status. */
  expectedLatencyMs: LatencySummary;
  expectedStatus: number;
  /** With `pickSku`: Σ quantities of the 201 answers, per SKU. */
  answeredBySku?: Record<string, number>;
}

/** One autocannon round, with per-answer bookkeeping: status counts, steady-window rates, exact percentiles. */
export async function runRound(spec: RoundSpec, expectedStatus: number, progress: RunProgress): Promise<RoundResult> {
  const method = spec.method ?? 'POST';
  const answeredBySku: Record<string, number> = {};
  const options: autocannon.Options = {
    url: spec.baseUrl + spec.path,
    method,
    headers: method === 'POST' ? { 'content-type': 'application/json', ...spec.headers } : { ...spec.headers },
    ...(method === 'POST' && { body: JSON.stringify(spec.body) }),
    ...(spec.confirmEach && { requests: reserveThenConfirm(spec) }),
    ...(spec.pickSku && { requests: spreadOrders(spec, answeredBySku) }),
    connections: spec.connections,
    pipelining: 1,
    timeout: spec.timeoutSeconds,
    ...(spec.amount !== undefined ? { amount: spec.amount } : { duration: spec.durationSeconds ?? 1 }),
  };
  const total = spec.amount ?? Math.round((spec.durationSeconds ?? 1) * 10);
  const bar = progress.round(spec.title, total, spec.amount !== undefined ? 'requests' : 'tenths of a second');

  const latencies: number[] = [];
  const statuses: number[] = [];
  const times: number[] = [];
  const perClient = new Map<unknown, number>();
  let firstIdleAt = Infinity;
  const started = performance.now();
  const ticker =
    spec.amount === undefined
      ? setInterval(() => bar.update(Math.round((performance.now() - started) / 100)), 200)
      : undefined;

  const result = await new Promise<autocannon.Result>((resolve, reject) => {
    const instance = autocannon(options, (error, result) => (error ? reject(error) : resolve(result)));
    instance.on(
      'response',
      (client: autocannon.Client & { responseMax?: number }, statusCode: number, _bytes: number, ms: number) => {
        const now = performance.now() - started;
        latencies.push(ms);
        statuses.push(statusCode);
        times.push(now);
        const answered = (perClient.get(client) ?? 0) + 1;
        perClient.set(client, answered);
        if (client.responseMax && answered >= client.responseMax && now < firstIdleAt) firstIdleAt = now;
        if (spec.amount !== undefined) bar.update(latencies.length, `${Math.round((latencies.length / now) * 1000)}/s`);
      },
    );
  });
  if (ticker) clearInterval(ticker);
  const elapsedMs = performance.now() - started;

  const statusCounts: Record<string, number> = {};
  for (const status of statuses) statusCounts[status] = (statusCounts[status] ?? 0) + 1;
  // Only a window that covers most of the round is trusted; otherwise the whole round is used.
  const steadyMs = firstIdleAt >= 0.5 * elapsedMs && firstIdleAt < Infinity ? firstIdleAt : elapsedMs;
  const steadyCounts: Record<string, number> = {};
  for (let i = 0; i < statuses.length; i++) {
    if (times[i]! <= steadyMs) steadyCounts[statuses[i]!] = (steadyCounts[statuses[i]!] ?? 0) + 1;
  }
  const ratePerSecond = Object.fromEntries(Object.entries(steadyCounts).map(([s, n]) => [s, n / (steadyMs / 1000)]));
  const expected = latencies.filter((_, i) => statuses[i] === expectedStatus);

  const round: RoundResult = {
    title: spec.title,
    autocannon: { options: { ...options }, flags: flagsOf(options, spec) },
    responses: latencies.length,
    errors: result.errors,
    timeouts: result.timeouts,
    statusCounts,
    durationSeconds: elapsedMs / 1000,
    steadySeconds: steadyMs / 1000,
    ratePerSecond,
    latencyMs: summarize(latencies),
    expectedLatencyMs: summarize(expected),
    expectedStatus,
    ...(spec.pickSku && { answeredBySku }),
  };
  bar.done(
    `${round.responses} answers in ${round.durationSeconds.toFixed(1)} s, ` +
      `${Math.round(ratePerSecond[expectedStatus] ?? 0)} × ${expectedStatus}/s, p99 ${round.latencyMs.p99.toFixed(1)} ms` +
      (round.errors ? `, ${round.errors} errors` : ''),
  );
  return round;
}

export function summarize(values: number[]): LatencySummary {
  if (values.length === 0) return { p50: 0, p97_5: 0, p99: 0, max: 0, mean: 0 };
  const sorted = Float64Array.from(values).sort();
  const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)]!;
  let sum = 0;
  for (const v of sorted) sum += v;
  return { p50: at(0.5), p97_5: at(0.975), p99: at(0.99), max: sorted[sorted.length - 1]!, mean: sum / sorted.length };
}

/** Two requests in turn per connection: place the round's order, then confirm the order that answer placed. */
function reserveThenConfirm(spec: RoundSpec): autocannon.Request[] {
  type Context = { orderId?: string };
  return [
    {
      method: 'POST',
      path: spec.path,
      body: JSON.stringify(spec.body),
      onResponse: (status: number, body: string, context: Context) => {
        context.orderId = status === 201 ? (JSON.parse(body) as { orderId: string }).orderId : undefined;
      },
    },
    {
      method: 'POST',
      setupRequest: (request: autocannon.Request, context: Context) => ({
        ...request,
        path: `/orders/${context.orderId ?? 'none'}/confirm`,
        body: undefined,
      }),
    },
  ] as autocannon.Request[];
}

/** One request per turn, its SKU chosen afresh each time; the 201 answers' units counted per SKU. */
function spreadOrders(spec: RoundSpec, answeredBySku: Record<string, number>): autocannon.Request[] {
  type Context = { sku?: string };
  const { quantity } = spec.body as { quantity: number };
  return [
    {
      method: 'POST',
      path: spec.path,
      setupRequest: (request: autocannon.Request, context: Context) => {
        context.sku = spec.pickSku!();
        return { ...request, body: JSON.stringify({ sku: context.sku, quantity }) };
      },
      onResponse: (status: number, _body: string, context: Context) => {
        if (status === 201 && context.sku) answeredBySku[context.sku] = (answeredBySku[context.sku] ?? 0) + quantity;
      },
    },
  ] as autocannon.Request[];
}

/** The same round as autocannon command-line flags, for the report. */
function flagsOf(options: autocannon.Options, spec: RoundSpec): string {
  const parts = [`-c ${options.connections}`, `-p ${options.pipelining}`, `-t ${options.timeout}`];
  parts.push(options.amount !== undefined ? `-a ${options.amount}` : `-d ${options.duration}`);
  parts.push(`-m ${options.method}`);
  for (const [name, value] of Object.entries(options.headers ?? {})) parts.push(`-H '${name}: ${value}'`);
  if (options.body !== undefined) parts.push(`-b '${options.body as string}'`);
  // Request sequences have no flag: the report says so instead of printing a command that would differ.
  if (spec.confirmEach) parts.push('(each placed order then confirmed: a request sequence, set in code)');
  if (spec.pickSku) parts.push('(a random SKU per request: a setupRequest callback, set in code)');
  parts.push(String(options.url));
  return `autocannon ${parts.join(' ')}`;
}
