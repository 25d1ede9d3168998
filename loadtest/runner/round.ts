import autocannon from 'autocannon';
import { statusCounts } from '../../test/support/order-load.js';
import { int, ms } from '../report/figures.js';

export interface RoundSpec {
  title: string;
  baseUrl: string;
  method?: 'GET' | 'POST';
  path: string;
  body?: unknown;
  headers?: Record<string, string>;
  /** Each connection confirms the order its last answer placed with its next request: the checkout a shop runs. */
  confirmEach?: boolean;
  /** Spread traffic: each request's SKU comes from here, and the units of its 201 answers are counted per SKU. */
  pickSku?: () => string;
  /** A sequence of the case's own, e.g. each request's body or path made afresh (autocannon's `requests`). */
  requests?: autocannon.Request[];
  connections: number;
  /** Warm-up rounds run for a time; measured rounds send a fixed number of requests, so the books can be exact. */
  durationSeconds?: number;
  amount?: number;
  timeoutSeconds: number;
  /** Every answer's latency is also pushed here, to summarise rounds measured in slices as one (`mergeSlices`). */
  latencies?: number[];
}

export type RoundResult = Awaited<ReturnType<typeof runRound>>;
type Context = { orderId?: string; sku?: string };
type Tally = Record<string, number>;
const add = (tally: Tally, key: string, n: number) => (tally[key] = (tally[key] ?? 0) + n);

// Answers timed to the µs (autocannon keeps whole ms of 2xx only); rates over the window every connection was busy.
export async function runRound(spec: RoundSpec, expectedStatus: number, progress: RunProgress) {
  const { method = 'POST', path, amount, durationSeconds = 1 } = spec;
  const answeredBySku: Tally = {};
  const body = method === 'POST' ? JSON.stringify(spec.body) : undefined;
  const { quantity } = spec.body as { quantity: number };
  // Request sequences: place then confirm the order that answer placed; or a SKU chosen afresh for every request.
  const placed = (status: number, text: string, context: Context) => {
    context.orderId = status === 201 ? (JSON.parse(text) as { orderId: string }).orderId : undefined;
  };
  const toConfirm = (request: autocannon.Request, { orderId = 'none' }: Context) =>
    ({ ...request, path: `/orders/${orderId}/confirm`, body: undefined }) as autocannon.Request;
  const confirm = [
    { method, path, body, onResponse: placed },
    { method, setupRequest: toConfirm },
  ];
  const pick = (request: autocannon.Request, context: Context) => {
    context.sku = spec.pickSku!();
    return { ...request, body: JSON.stringify({ sku: context.sku, quantity }) };
  };
  const countUnits = (status: number, _text: string, { sku }: Context) => {
    if (status === 201 && sku) add(answeredBySku, sku, quantity);
  };
  const spread = [{ method, path, setupRequest: pick, onResponse: countUnits }];
  const requests = spec.requests ?? (spec.pickSku ? spread : spec.confirmEach ? confirm : undefined);
  const options: autocannon.Options = {
    url: spec.baseUrl + path,
    method,
    headers: method === 'POST' ? { 'content-type': 'application/json', ...spec.headers } : { ...spec.headers },
    ...(body !== undefined && { body }),
    ...(requests && { requests }),
    connections: spec.connections,
    pipelining: 1,
    timeout: spec.timeoutSeconds,
    ...(amount !== undefined ? { amount } : { duration: durationSeconds }),
  };
  progress.note(`${spec.title}: ${amount === undefined ? `${durationSeconds} s` : `${int(amount)} requests`}…`);
  const answers: { ms: number; status: number; at: number }[] = [];
  const perClient = new Map<unknown, number>();
  let firstIdleAt = Infinity;
  const started = performance.now();
  const result = await new Promise<autocannon.Result>((resolve, reject) => {
    const instance = autocannon(options, (error, done) => (error ? reject(error) : resolve(done)));
    instance.on('response', (client: autocannon.Client & { responseMax?: number }, status: number, _b, ms: number) => {
      const at = performance.now() - started;
      answers.push({ ms, status, at });
      spec.latencies?.push(ms);
      const answered = (perClient.get(client) ?? 0) + 1;
      perClient.set(client, answered);
      if (client.responseMax && answered >= client.responseMax) firstIdleAt = Math.min(firstIdleAt, at);
    });
  });
  const elapsedMs = performance.now() - started;
  // Only a window that covers most of the round is trusted; otherwise the whole round is used.
  const steadyMs = firstIdleAt >= 0.5 * elapsedMs && firstIdleAt < Infinity ? firstIdleAt : elapsedMs;
  const steady = Object.entries(statusCounts(answers.filter((a) => a.at <= steadyMs)));
  const round = {
    title: spec.title,
    responses: answers.length,
    statusCounts: statusCounts(answers),
    durationSeconds: elapsedMs / 1000,
    ratePerSecond: Object.fromEntries(steady.map(([s, n]) => [s, n / (steadyMs / 1000)])),
    latencyMs: summarize(answers.map((a) => a.ms)),
    ...(spec.pickSku && { answeredBySku }),
  };
  const rate = `${int(round.ratePerSecond[expectedStatus] ?? 0)} answers/s (${expectedStatus})`;
  const latency = `p50 ${ms(round.latencyMs.p50)} ms, p99 ${ms(round.latencyMs.p99)} ms`;
  const statuses = Object.entries(round.statusCounts).map(([code, n]) => `${code}: ${int(n)}`);
  const errors = result.errors ? `, ${int(result.errors)} connection errors` : '';
  progress.note(`${spec.title}: ${rate}, ${latency}; ${statuses.join(', ') || 'no answers'}${errors}`);
  return round;
}

/** A round's slices as one: counts summed, each rate its answers over the slices' steady time, every latency. */
export function mergeSlices(title: string, slices: RoundResult[], latencies: number[]): RoundResult {
  const [statusCounts, steadySeconds, answeredBySku]: [Tally, Tally, Tally] = [{}, {}, {}];
  for (const slice of slices) {
    for (const [status, count] of Object.entries(slice.statusCounts)) {
      add(statusCounts, status, count);
      add(steadySeconds, status, count / (slice.ratePerSecond[status] ?? Infinity));
    }
    for (const [sku, units] of Object.entries(slice.answeredBySku ?? {})) add(answeredBySku, sku, units);
  }
  const rates = Object.entries(statusCounts).map(([status, count]) => [status, count / steadySeconds[status]!]);
  return {
    title,
    responses: slices.reduce((sum, slice) => sum + slice.responses, 0),
    statusCounts,
    durationSeconds: slices.reduce((sum, slice) => sum + slice.durationSeconds, 0),
    ratePerSecond: Object.fromEntries(rates),
    latencyMs: summarize(latencies),
    ...(slices[0]!.answeredBySku && { answeredBySku }),
  };
}

function summarize(values: number[]) {
  const sorted = Float64Array.from(values).sort();
  const at = (q: number) => sorted[Math.max(0, Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1))] ?? 0;
  return { p50: at(0.5), p97_5: at(0.975), p99: at(0.99), max: at(1) };
}

/** Progress while the run goes: a line when a round starts and one with its figures when it ends. */
export class RunProgress {
  private readonly started = Date.now();

  note(message: string): void {
    const elapsed = new Date(Date.now() - this.started).toISOString().slice(11, 19); // hh:mm:ss
    process.stderr.write(`[${elapsed}] ${message}\n`);
  }
}
