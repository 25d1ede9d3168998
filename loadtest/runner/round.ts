import autocannon from 'autocannon';
import cliProgress from 'cli-progress';

export interface RoundSpec {
  title: string;
  baseUrl: string;
  /** POST (default), with `body` as JSON; or GET. */
  method?: 'GET' | 'POST';
  path: string;
  body?: unknown;
  headers?: Record<string, string>;
  /** Each connection confirms the order its last answer placed with its next request: the checkout a shop runs. */
  confirmEach?: boolean;
  /** Spread traffic: each request's SKU comes from here, and the units of its 201 answers are counted per SKU. */
  pickSku?: () => string;
  connections: number;
  /** Warm-up rounds run for a time; measured rounds send a fixed number of requests, so the books can be exact. */
  durationSeconds?: number;
  amount?: number;
  timeoutSeconds: number;
}

export type RoundResult = Awaited<ReturnType<typeof runRound>>;

/**
 * One autocannon round, with its own bookkeeping per answer: autocannon's histogram keeps whole milliseconds of 2xx
 * answers only, and its rates include the tail of the round, when fewer connections are still busy. Here every
 * answer counts, to the microsecond, and rates cover the steady window: until the first connection sent its last
 * request.
 */
export async function runRound(spec: RoundSpec, expectedStatus: number, progress: RunProgress) {
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
  const timed = spec.amount === undefined;
  const bar = progress.round(spec.title, spec.amount ?? Math.round((spec.durationSeconds ?? 1) * 10), timed);
  const answers: { ms: number; status: number; at: number }[] = [];
  const perClient = new Map<unknown, number>();
  let firstIdleAt = Infinity;
  const started = performance.now();
  const ticker = timed ? setInterval(() => bar.update((performance.now() - started) / 100), 200) : undefined;
  const result = await new Promise<autocannon.Result>((resolve, reject) => {
    const instance = autocannon(options, (error, done) => (error ? reject(error) : resolve(done)));
    instance.on('response', (client: autocannon.Client & { responseMax?: number }, status: number, _b, ms: number) => {
      const at = performance.now() - started;
      answers.push({ ms, status, at });
      const answered = (perClient.get(client) ?? 0) + 1;
      perClient.set(client, answered);
      if (client.responseMax && answered >= client.responseMax) firstIdleAt = Math.min(firstIdleAt, at);
      if (!timed) bar.update(answers.length, `${Math.round((answers.length / at) * 1000)}/s`);
    });
  });
  clearInterval(ticker);
  const elapsedMs = performance.now() - started;
  // Only a window that covers most of the round is trusted; otherwise the whole round is used.
  const steadyMs = firstIdleAt >= 0.5 * elapsedMs && firstIdleAt < Infinity ? firstIdleAt : elapsedMs;
  const count = (list: typeof answers) => {
    const counts: Record<string, number> = {};
    for (const { status } of list) counts[status] = (counts[status] ?? 0) + 1;
    return counts;
  };
  const statusCounts = count(answers);
  const steady = count(answers.filter((a) => a.at <= steadyMs));
  const ratePerSecond = Object.fromEntries(Object.entries(steady).map(([s, n]) => [s, n / (steadyMs / 1000)]));
  const round = {
    title: spec.title,
    autocannon: { options: { ...options }, flags: flagsOf(options, spec) },
    responses: answers.length,
    errors: result.errors,
    timeouts: result.timeouts,
    statusCounts,
    durationSeconds: elapsedMs / 1000,
    steadySeconds: steadyMs / 1000,
    ratePerSecond,
    latencyMs: summarize(answers.map((a) => a.ms)),
    expectedLatencyMs: summarize(answers.filter((a) => a.status === expectedStatus).map((a) => a.ms)),
    expectedStatus,
    ...(spec.pickSku && { answeredBySku }),
  };
  bar.done(
    `${round.responses} answers in ${round.durationSeconds.toFixed(1)} s, ${Math.round(ratePerSecond[expectedStatus] ?? 0)} × ` +
      `${expectedStatus}/s, p99 ${round.latencyMs.p99.toFixed(1)} ms${round.errors ? `, ${round.errors} errors` : ''}`,
  );
  return round;
}

function summarize(values: number[]) {
  if (values.length === 0) return { p50: 0, p97_5: 0, p99: 0, max: 0, mean: 0 };
  const sorted = Float64Array.from(values).sort();
  const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)]!;
  const mean = sorted.reduce((a, b) => a + b, 0) / sorted.length;
  return { p50: at(0.5), p97_5: at(0.975), p99: at(0.99), max: sorted[sorted.length - 1]!, mean };
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
  parts.push(options.amount !== undefined ? `-a ${options.amount}` : `-d ${options.duration}`, `-m ${options.method}`);
  for (const [name, value] of Object.entries(options.headers ?? {})) parts.push(`-H '${name}: ${value}'`);
  if (options.body !== undefined) parts.push(`-b '${options.body as string}'`);
  // Request sequences have no flag: the report says so instead of printing a command that would differ.
  if (spec.confirmEach) parts.push('(each placed order then confirmed: a request sequence, set in code)');
  if (spec.pickSku) parts.push('(a random SKU per request: a setupRequest callback, set in code)');
  return `autocannon ${parts.join(' ')} ${String(options.url)}`;
}

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
    // cli-progress draws nothing where stderr is no terminal: there the round's start gets a line of its own.
    if (!process.stderr.isTTY) this.note(`${title}: ${total} ${unit}…`);
    const format = `  {title} |{bar}| {value}/{total} ${unit} | {status}`;
    const options = { format, hideCursor: true, clearOnComplete: true, stream: process.stderr };
    const bar = new cliProgress.SingleBar(options, cliProgress.Presets.shades_classic);
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
