import { performance } from 'node:perf_hooks';
import type { Answer, History, Operation } from './history.js';

/**
 * A linearizability checker for the service's answers, one SKU at a time (a SKU's operations touch no other SKU's
 * state, so the history splits by SKU: Horn & Kroening's P-compositionality). Each SKU's history is searched for a
 * linearization by Wing & Gong's algorithm with Lowe's memoisation of (operations linearized, state), the algorithm of
 * Porcupine and Knossos, against a sequential model of one SKU's stock:
 *
 * - place n: `placed` if available ≥ n (available −n, reserved or sold +n), else `out_of_stock` with what is available;
 * - confirm: reserved → confirmed (its units move from reserved to sold); again: confirmed; after an end: refused with
 *   the order's status; cancel: reserved or confirmed → cancelled, its units back to available; expire: reserved →
 *   expired, its units back; a cancel after the hold ran out may expire it instead;
 * - restock n / adjust δ: available +n / +δ; re-segment: no change; read: available, reserved, sold as they are.
 *
 * An operation without a definite answer may take effect or not, at any time after its invoke. The search is bounded
 * in steps and time: past the bound the verdict is `unknown`, never `ok`.
 *
 * The model's counters carry bounds on their starting values, so a window of operations cut out of a history can be
 * checked from a state it does not know (each counter ≥ 0, anything else free), and orders placed before the window
 * have an unknown status: that is how a failure is narrowed to the operations that cannot be explained.
 */

export type Verdict = 'ok' | 'violation' | 'unknown';

export interface CheckOptions {
  /** Steps of the search for the whole history, over all SKUs (default 5,000,000). */
  maxSteps?: number;
  /** Wall time for the whole history (default 10 s). */
  timeBudgetMs?: number;
}

export interface SkuVerdict {
  sku: string;
  verdict: Verdict;
  operations: number;
  steps: number;
  /** For a violation: the smallest window found that cannot be explained, and the state it starts from. */
  window?: { from: string; linearizedBefore: number; operations: Operation[] };
}

export interface HistoryVerdict {
  verdict: Verdict;
  skus: SkuVerdict[];
  steps: number;
  elapsedMs: number;
  /** Every violation's window (and every undecided SKU), printable. */
  report: string;
}

const ABSENT = 0;
const RESERVED = 1;
const CONFIRMED = 2;
const CANCELLED = 3;
const EXPIRED = 4;
const UNKNOWN = 5;
const STATUS_CODE = { reserved: RESERVED, confirmed: CONFIRMED, cancelled: CANCELLED, expired: EXPIRED } as const;

/** One counter: its value is (its value at the start) + d, the start known to lie in [lo, hi]. */
interface Counter {
  d: number;
  lo: number;
  hi: number;
}

interface State {
  available: Counter;
  reserved: Counter;
  sold: Counter;
  /** Status of each order some confirm, cancel or expire names (by the SKU's order index). */
  orders: Uint8Array;
}

const counterKey = (c: Counter) => `${c.d},${c.lo},${c.hi}`;
const stateKey = (s: State) =>
  `${counterKey(s.available)};${counterKey(s.reserved)};${counterKey(s.sold)};${String.fromCharCode(...s.orders)}`;

function add(c: Counter, delta: number): Counter | null {
  const d = c.d + delta;
  const lo = Math.max(c.lo, -d);
  return lo <= c.hi ? { d, lo, hi: c.hi } : null;
}
function atLeast(c: Counter, n: number): Counter | null {
  const lo = Math.max(c.lo, n - c.d);
  return lo <= c.hi ? { ...c, lo } : null;
}
function below(c: Counter, n: number): Counter | null {
  const hi = Math.min(c.hi, n - 1 - c.d);
  return c.lo <= hi ? { ...c, hi } : null;
}
function equal(c: Counter, v: number): Counter | null {
  const lo = Math.max(c.lo, v - c.d);
  const hi = Math.min(c.hi, v - c.d);
  return lo <= hi ? { d: c.d, lo, hi } : null;
}
const known = (v: number): Counter => ({ d: 0, lo: v, hi: v });
const free = (): Counter => ({ d: 0, lo: 0, hi: Number.MAX_SAFE_INTEGER });
const valueOf = (c: Counter) =>
  c.lo === c.hi ? String(c.lo + c.d) : `${c.lo + c.d}…${c.hi === Number.MAX_SAFE_INTEGER ? '' : c.hi + c.d}`;

/** `state` with the available/reserved/sold counters moved by the deltas given, or null if one would go below 0. */
function move(state: State, da: number, dr: number, ds: number, order?: [number, number]): State | null {
  const available = da === 0 ? state.available : add(state.available, da);
  const reserved = dr === 0 ? state.reserved : add(state.reserved, dr);
  const sold = ds === 0 ? state.sold : add(state.sold, ds);
  if (!available || !reserved || !sold) return null;
  let orders = state.orders;
  if (order) {
    orders = orders.slice();
    orders[order[0]] = order[1];
  }
  return { available, reserved, sold, orders };
}

/** The SKU's order index: each order that a confirm, cancel or expire names. */
type OrderIndex = Map<string, number>;

function indexOf(orders: OrderIndex, op: Operation): number | undefined {
  if (op.call.kind === 'place') return op.answer.kind === 'placed' ? orders.get(op.answer.orderId) : undefined;
  return 'orderId' in op.call ? orders.get(op.call.orderId) : undefined;
}

/** The states the model can be in after `op` from `state`, given the answer the service gave. */
function step(state: State, op: Operation, orders: OrderIndex): State[] {
  const index = indexOf(orders, op);
  if (index !== undefined && state.orders[index] === UNKNOWN && op.call.kind !== 'place') {
    // An order placed before the window checked: each status it may have had.
    return [RESERVED, CONFIRMED, CANCELLED, EXPIRED].flatMap((status) => {
      const orders2 = state.orders.slice();
      orders2[index] = status;
      return step({ ...state, orders: orders2 }, op, orders);
    });
  }
  const answer: Answer = op.answer;
  const unchanged = [state];
  const only = (next: State | null) => (next ? [next] : []);
  const status = index === undefined ? UNKNOWN : state.orders[index]!;
  const call = op.call;
  switch (call.kind) {
    case 'place': {
      const n = call.quantity;
      const take = (s: State | null) => {
        const taken = s && atLeast(s.available, n);
        if (!s || !taken) return null;
        return move({ ...s, available: taken }, -n, call.hold ? n : 0, call.hold ? 0 : n);
      };
      if (answer.kind === 'unknown') return [state, ...only(take(state))];
      if (answer.kind === 'placed') {
        const placed = take(state);
        if (!placed || index === undefined) return only(placed);
        if (state.orders[index] !== ABSENT) return [];
        const next = placed.orders.slice();
        next[index] = call.hold ? RESERVED : CONFIRMED;
        return [{ ...placed, orders: next }];
      }
      if (answer.kind === 'out_of_stock') {
        let available = below(state.available, n);
        if (available && answer.available !== undefined) available = equal(available, answer.available);
        return available ? [{ ...state, available }] : [];
      }
      return [];
    }
    case 'confirm': {
      const q = call.quantity;
      const confirm = () => (status === RESERVED ? only(move(state, 0, -q, q, [index!, CONFIRMED])) : []);
      if (answer.kind === 'unknown') return [state, ...confirm()];
      if (answer.kind !== 'status') return [];
      if (answer.status === 'confirmed') return status === CONFIRMED ? unchanged : confirm();
      // Refused: the order had ended, or its hold had run out before the sweep came.
      if (answer.status === 'expired') return status === EXPIRED || status === RESERVED ? unchanged : [];
      return status === STATUS_CODE[answer.status] ? unchanged : [];
    }
    case 'cancel': {
      const q = call.quantity;
      const end = (to: number) =>
        status === RESERVED
          ? only(move(state, q, -q, 0, [index!, to]))
          : status === CONFIRMED && to === CANCELLED
            ? only(move(state, q, 0, -q, [index!, to]))
            : [];
      if (answer.kind === 'unknown') return [state, ...end(CANCELLED), ...end(EXPIRED)];
      if (answer.kind !== 'status') return [];
      if (answer.status === 'cancelled') return status === CANCELLED ? unchanged : end(CANCELLED);
      if (answer.status === 'expired') return status === EXPIRED ? unchanged : end(EXPIRED);
      return [];
    }
    case 'expire':
      return status === RESERVED
        ? [state, ...only(move(state, call.quantity, -call.quantity, 0, [index!, EXPIRED]))]
        : unchanged;
    case 'restock':
    case 'adjust': {
      const delta = call.kind === 'restock' ? call.quantity : call.delta;
      const changed = only(move(state, delta, 0, 0));
      if (answer.kind === 'unknown') return [state, ...changed];
      return answer.kind === 'ok' || answer.kind === 'read' ? changed : [];
    }
    case 'resegment':
      return unchanged;
    case 'read': {
      if (answer.kind !== 'read') return unchanged;
      const available = equal(state.available, answer.available);
      const reserved = equal(state.reserved, answer.reserved);
      const sold = equal(state.sold, answer.sold);
      return available && reserved && sold ? [{ ...state, available, reserved, sold }] : [];
    }
  }
}

interface Entry {
  op: number;
  call: boolean;
  time: number;
  match: Entry | null;
  prev: Entry | null;
  next: Entry | null;
}

interface Budget {
  steps: number;
  maxSteps: number;
  deadline: number;
}

interface SearchResult {
  verdict: Verdict;
  /** The furthest the search got: how many operations, which, and the state after them. */
  best: { count: number; linearized: Uint16Array; state: State };
}

/** Wing & Gong's search with Lowe's cache, over `ops` from `initial`. */
function search(ops: Operation[], initial: State, orders: OrderIndex, budget: Budget): SearchResult {
  const entries: Entry[] = [];
  ops.forEach((op, i) => {
    const call: Entry = {
      op: i,
      call: true,
      time: op.invokedAt - (op.lagMs ?? 0),
      match: null,
      prev: null,
      next: null,
    };
    const ret: Entry = { op: i, call: false, time: op.returnedAt, match: null, prev: null, next: null };
    call.match = ret;
    entries.push(call, ret);
  });
  // At equal times a call goes first: the two operations count as concurrent.
  entries.sort((a, b) => a.time - b.time || (a.call === b.call ? 0 : a.call ? -1 : 1));
  const head: Entry = { op: -1, call: false, time: -Infinity, match: null, prev: null, next: null };
  let last = head;
  for (const e of entries) {
    e.prev = last;
    last.next = e;
    last = e;
  }
  const lift = (e: Entry) => {
    e.prev!.next = e.next;
    if (e.next) e.next.prev = e.prev;
    const m = e.match!;
    m.prev!.next = m.next;
    if (m.next) m.next.prev = m.prev;
  };
  const unlift = (e: Entry) => {
    const m = e.match!;
    m.prev!.next = m;
    if (m.next) m.next.prev = m;
    e.prev!.next = e;
    if (e.next) e.next.prev = e;
  };

  const linearized = new Uint16Array(Math.ceil(ops.length / 16) || 1);
  const flip = (i: number) => (linearized[i >> 4]! ^= 1 << (i & 15));
  const seen = new Set<string>();
  const keyOf = (s: State) => String.fromCharCode(...linearized) + '|' + stateKey(s);
  const stack: { entry: Entry; state: State; rest: State[] }[] = [];
  let state = initial;
  let best = { count: 0, linearized: linearized.slice(), state };
  let entry = head.next;
  while (head.next) {
    if (++budget.steps > budget.maxSteps || ((budget.steps & 1023) === 0 && performance.now() > budget.deadline)) {
      return { verdict: 'unknown', best };
    }
    if (entry!.call) {
      const i = entry!.op;
      flip(i);
      const fresh = step(state, ops[i]!, orders).filter((s) => !seen.has(keyOf(s)));
      if (fresh.length > 0) {
        const [next, ...rest] = fresh;
        seen.add(keyOf(next!));
        stack.push({ entry: entry!, state, rest });
        state = next!;
        lift(entry!);
        if (stack.length > best.count) best = { count: stack.length, linearized: linearized.slice(), state };
        entry = head.next;
      } else {
        flip(i);
        entry = entry!.next;
      }
    } else {
      // An operation returned without being linearized: undo the last choice.
      const top = stack.at(-1);
      if (!top) return { verdict: 'violation', best };
      let alternative: State | undefined;
      while (top.rest.length > 0 && !alternative) {
        const candidate = top.rest.shift()!;
        if (!seen.has(keyOf(candidate))) alternative = candidate;
      }
      if (alternative) {
        seen.add(keyOf(alternative));
        state = alternative;
        entry = head.next;
        continue;
      }
      stack.pop();
      state = top.state;
      flip(top.entry.op);
      unlift(top.entry);
      entry = top.entry.next;
    }
  }
  return { verdict: 'ok', best };
}

/** The SKU's order index and the statuses its orders start with: absent if placed within `ops`, else unknown. */
function ordersOf(ops: Operation[], startingStatuses?: { index: OrderIndex; statuses: Uint8Array }) {
  if (startingStatuses) return startingStatuses;
  const index: OrderIndex = new Map();
  for (const op of ops) {
    if ('orderId' in op.call && !index.has(op.call.orderId)) index.set(op.call.orderId, index.size);
  }
  const statuses = new Uint8Array(index.size).fill(UNKNOWN);
  for (const op of ops) {
    if (op.call.kind === 'place' && op.answer.kind === 'placed') {
      const i = index.get(op.answer.orderId);
      if (i !== undefined) statuses[i] = ABSENT;
    }
  }
  return { index, statuses };
}

/** Operations that constrain nothing are left out: a read without an answer. */
const checked = (op: Operation) => !(op.call.kind === 'read' && op.answer.kind !== 'read');

function checkSku(
  sku: string,
  all: Operation[],
  start: { available: number; reserved: number; sold: number } | undefined,
  budget: Budget,
): SkuVerdict {
  const ops = all.filter(checked);
  const { index, statuses } = ordersOf(ops);
  const initial: State = start
    ? { available: known(start.available), reserved: known(start.reserved), sold: known(start.sold), orders: statuses }
    : { available: free(), reserved: free(), sold: free(), orders: statuses };
  const stepsBefore = budget.steps;
  const result = search(ops, initial, index, budget);
  const verdict: SkuVerdict = {
    sku,
    verdict: result.verdict,
    operations: ops.length,
    steps: budget.steps - stepsBefore,
  };
  if (result.verdict === 'violation') verdict.window = narrow(ops, result.best, index, budget);
  return verdict;
}

/**
 * The smallest window found that cannot be explained: from the furthest point the search reached (its state, after
 * the operations it had linearized), the operation whose return it could not pass and those invoked before that
 * return; then, one at a time, every operation whose removal leaves the rest still unexplainable is dropped.
 */
function narrow(ops: Operation[], best: SearchResult['best'], index: OrderIndex, budget: Budget): SkuVerdict['window'] {
  const isLinearized = (i: number) => (best.linearized[i >> 4]! & (1 << (i & 15))) !== 0;
  const pending = ops.filter((_, i) => !isLinearized(i));
  const blockedAt = Math.min(...pending.map((op) => op.returnedAt));
  let window = pending.filter((op) => op.invokedAt - (op.lagMs ?? 0) <= blockedAt);
  const fails = (candidate: Operation[]) => {
    const probe: Budget = { steps: 0, maxSteps: 200_000, deadline: budget.deadline };
    return search(candidate, best.state, index, probe).verdict === 'violation';
  };
  if (fails(window)) {
    for (let i = 0; i < window.length && window.length > 1;) {
      const without = window.filter((_, j) => j !== i);
      if (fails(without)) window = without;
      else i++;
    }
  }
  const s = best.state;
  const names = ['absent', 'reserved', 'confirmed', 'cancelled', 'expired', 'of unknown status'];
  const statuses = [...new Set(window.flatMap((op) => ('orderId' in op.call ? [op.call.orderId] : [])))].map(
    (orderId) => `, order ${orderId} ${names[s.orders[index.get(orderId)!]!]}`,
  );
  return {
    from: `available ${valueOf(s.available)}, reserved ${valueOf(s.reserved)}, sold ${valueOf(s.sold)}${statuses.join('')}`,
    linearizedBefore: best.count,
    operations: window,
  };
}

/** Checks every SKU's history; stops deciding (unknown) once the steps or the time of `options` are spent. */
export function checkHistory(history: History, options: CheckOptions = {}): HistoryVerdict {
  return checkOperations(history.operations, history.initial, options);
}

export function checkOperations(
  operations: readonly Operation[],
  initial: ReadonlyMap<string, { available: number; reserved: number; sold: number }>,
  options: CheckOptions = {},
): HistoryVerdict {
  const startedAt = performance.now();
  const budget: Budget = {
    steps: 0,
    maxSteps: options.maxSteps ?? 5_000_000,
    deadline: startedAt + (options.timeBudgetMs ?? 10_000),
  };
  const bySku = new Map<string, Operation[]>();
  for (const op of operations) {
    let list = bySku.get(op.sku);
    if (!list) bySku.set(op.sku, (list = []));
    list.push(op);
  }
  const skus = [...bySku].map(([sku, ops]) => checkSku(sku, ops, initial.get(sku), budget));
  const verdict: Verdict = skus.some((s) => s.verdict === 'violation')
    ? 'violation'
    : skus.some((s) => s.verdict === 'unknown')
      ? 'unknown'
      : 'ok';
  const origin = Math.min(...operations.map((op) => op.invokedAt));
  const report = skus
    .filter((s) => s.verdict !== 'ok')
    .map((s) => describe(s, origin))
    .join('\n');
  return { verdict, skus, steps: budget.steps, elapsedMs: performance.now() - startedAt, report };
}

function describe(s: SkuVerdict, origin: number): string {
  if (s.verdict === 'unknown')
    return `SKU ${s.sku}: undecided within the bound (${s.operations} operations, ${s.steps} steps)`;
  const w = s.window!;
  return [
    `SKU ${s.sku}: not linearizable. From ${w.from} (after ${w.linearizedBefore} operations linearized), ` +
      `these ${w.operations.length} cannot be explained:`,
    ...w.operations.map((op) => `  ${formatOperation(op, origin)}`),
  ].join('\n');
}

export function formatOperation(op: Operation, origin = 0): string {
  const at = (t: number) => (t === Infinity ? '∞' : `+${(t - origin).toFixed(1)} ms`);
  const { kind, ...args } = op.call;
  const { kind: answer, ...said } = op.answer;
  const lag = op.lagMs ? ` (may lag ${op.lagMs} ms)` : '';
  const where = op.target ? ` at ${op.target}` : '';
  return `#${op.id} [${at(op.invokedAt)} → ${at(op.returnedAt)}] ${kind} ${JSON.stringify(args)} → ${answer} ${JSON.stringify(said)}${lag}${where}`;
}
