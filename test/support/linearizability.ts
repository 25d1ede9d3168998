import { performance } from 'node:perf_hooks';
import type { Answer, History, Operation } from './history.js';

/**
 * A linearizability checker for the service's answers, one SKU at a time (a SKU's operations touch no other SKU's
 * state, so the history splits by SKU: Horn & Kroening's P-compositionality). Each SKU's history is searched for a
 * linearization by Wing & Gong's algorithm with Lowe's memoisation of (operations linearized, state), the algorithm of
 * Porcupine and Knossos, against a sequential model of one SKU's stock:
 *
 * - place n: `placed` if available ≥ n (available −n, reserved or sold +n), else `out_of_stock` with at most what is
 *   available (the 409 reports an upper bound when it did not hold every segment);
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
  /** The state as a string, once computed. */
  key?: string;
}

const counterKey = (c: Counter) => `${c.d},${c.lo},${c.hi}`;
const stateKey = (s: State) =>
  (s.key ??= `${counterKey(s.available)};${counterKey(s.reserved)};${counterKey(s.sold)};${String.fromCharCode(...s.orders)}`);

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
function atMost(c: Counter, v: number): Counter | null {
  const hi = Math.min(c.hi, v - c.d);
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

/** `state` with some of its parts replaced (and its key to be computed again). */
function patched(state: State, parts: Partial<Omit<State, 'key'>>): State {
  const { available, reserved, sold, orders } = { ...state, ...parts };
  return { available, reserved, sold, orders };
}

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
      return step(patched(state, { orders: orders2 }), op, orders);
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
        return move(patched(s, { available: taken }), -n, call.hold ? n : 0, call.hold ? 0 : n);
      };
      if (answer.kind === 'unknown') return [state, ...only(take(state))];
      if (answer.kind === 'placed') {
        const placed = take(state);
        if (!placed || index === undefined) return only(placed);
        if (state.orders[index] !== ABSENT) return [];
        const next = placed.orders.slice();
        next[index] = call.hold ? RESERVED : CONFIRMED;
        return [patched(placed, { orders: next })];
      }
      if (answer.kind === 'out_of_stock') {
        // The availability reported is at most what was left: exact when the batch held every open segment, else
        // what it held plus upper bounds of the others (`decideBatch`).
        let available = below(state.available, n);
        if (available && answer.available !== undefined) available = atMost(available, answer.available);
        return available ? [patched(state, { available })] : [];
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
      return available && reserved && sold ? [patched(state, { available, reserved, sold })] : [];
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

/** How far `op` may move each counter: [least, most] for available, reserved and sold; 0 in the range if it may not apply. */
function reach(op: Operation): [number, number][] {
  const { call, answer } = op;
  const maybe = answer.kind === 'unknown';
  const span = (delta: number, optional: boolean): [number, number] =>
    optional ? [Math.min(0, delta), Math.max(0, delta)] : [delta, delta];
  switch (call.kind) {
    case 'place': {
      if (answer.kind !== 'placed' && !maybe)
        return [
          [0, 0],
          [0, 0],
          [0, 0],
        ];
      const n = call.quantity;
      return [span(-n, maybe), span(call.hold ? n : 0, maybe), span(call.hold ? 0 : n, maybe)];
    }
    case 'confirm':
      return [[0, 0], span(-call.quantity, true), span(call.quantity, true)];
    case 'cancel':
      return [span(call.quantity, true), span(-call.quantity, true), span(-call.quantity, true)];
    case 'expire':
      return [span(call.quantity, true), span(-call.quantity, true), [0, 0]];
    case 'restock':
    case 'adjust':
      return [span(call.kind === 'restock' ? call.quantity : call.delta, maybe), [0, 0], [0, 0]];
    default:
      return [
        [0, 0],
        [0, 0],
        [0, 0],
      ];
  }
}

/**
 * What makes two operations interchangeable in a linearization, or undefined for one that has no twin: a place whose
 * order nothing else names, by its quantity, hold and answer (a refusal with the availability it reported), and a
 * restock or adjustment by its change and answer. Two alike operations step the model the same way from any state.
 */
function likeness(op: Operation, orders: OrderIndex): string | undefined {
  const { call, answer } = op;
  const said = answer.kind === 'out_of_stock' ? `${answer.kind}:${answer.available ?? ''}` : answer.kind;
  switch (call.kind) {
    case 'place':
      if (answer.kind === 'placed' && orders.has(answer.orderId)) return undefined;
      return `place:${call.quantity}:${call.hold}|${said}`;
    case 'restock':
      return `restock:${call.quantity}|${said}`;
    case 'adjust':
      return `adjust:${call.delta}|${said}`;
    default:
      return undefined;
  }
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

  // The set linearized, as bits and as a 64-bit Zobrist hash (two random words per operation, XORed in and out),
  // which keys the cache: two different sets meeting in one hash with one state is a chance of about n²/2⁶⁴.
  const linearized = new Uint16Array(Math.ceil(ops.length / 16) || 1);
  const words = Uint32Array.from({ length: 2 * ops.length }, () => (Math.random() * 2 ** 32) >>> 0);
  let h1 = 0;
  let h2 = 0;
  const flip = (i: number) => {
    linearized[i >> 4]! ^= 1 << (i & 15);
    h1 ^= words[2 * i]!;
    h2 ^= words[2 * i + 1]!;
  };
  const seen = new Set<string>();
  const keyOf = (s: State) => `${h1}:${h2}|${stateKey(s)}`;
  // Every operation whose call comes before the first return still in the list may be linearized next. They are
  // tried in the order of their returns: the one that must be placed soonest first (a read overlapping many orders
  // is tried before them, not after every subset of them). One without an answer is tried at its invoke, first as
  // not applied, so that it does not wait at the head of the list to be tried after all the others.
  //
  // Of operations alike (`likeness`), only the first in that order is a candidate: a linearization that takes a later
  // one first stays one with the two swapped, since the earlier is invoked already and returns no later. Without this
  // the search tries every subset of the alike orders in flight (two dozen one-to-three-unit orders overlapping a
  // read that fixes only their sum), which no memo keeps small.
  const order = (e: Entry) => (e.match!.time === Infinity ? e.time : e.match!.time);
  const alike = ops.map((op) => likeness(op, orders));
  const candidatesNow = () => {
    const candidates: Entry[] = [];
    for (let e = head.next; e && e.call; e = e.next) candidates.push(e);
    candidates.sort((a, b) => order(a) - order(b));
    const taken = new Set<string>();
    return candidates.filter((e) => {
      const kind = alike[e.op];
      if (kind === undefined) return true;
      if (taken.has(kind)) return false;
      taken.add(kind);
      return true;
    });
  };
  // A read still to be placed must find its counters where it says: if no order of the operations that may come
  // before it can bring them there, this branch is dead however it goes on (a read after orders that took too much).
  const reaches = ops.map(reach);
  const unreachable = (state: State) => {
    for (let e = head.next; e && e.call; e = e.next) {
      const read = ops[e.op]!;
      if (read.answer.kind !== 'read') continue;
      const said = [read.answer.available, read.answer.reserved, read.answer.sold];
      const now = [state.available, state.reserved, state.sold];
      const lo = now.map((c) => c.lo + c.d);
      const hi = now.map((c) => c.hi + c.d);
      for (let x = head.next; x && x.time < e.match!.time; x = x.next) {
        if (!x.call || x === e) continue;
        const must = x.match!.time < read.invokedAt - (read.lagMs ?? 0);
        reaches[x.op]!.forEach(([least, most], k) => {
          lo[k]! += must ? least : Math.min(0, least);
          hi[k]! += must ? most : Math.max(0, most);
        });
      }
      if (said.some((v, k) => v < lo[k]! || v > hi[k]!)) return true;
    }
    return false;
  };
  interface Frame {
    state: State;
    candidates: Entry[];
    next: number;
    /** The candidate linearized now, and the other states its step may lead to. */
    lifted: Entry | null;
    others: State[];
  }
  const stack: Frame[] = [{ state: initial, candidates: candidatesNow(), next: 0, lifted: null, others: [] }];
  let best = { count: 0, linearized: linearized.slice(), state: initial };
  for (;;) {
    if (++budget.steps > budget.maxSteps || ((budget.steps & 1023) === 0 && performance.now() > budget.deadline)) {
      return { verdict: 'unknown', best };
    }
    const frame = stack.at(-1);
    if (!frame) return { verdict: 'violation', best };
    let child: State | undefined;
    while (!child) {
      const other = frame.others.shift();
      if (other) {
        if (seen.has(keyOf(other))) continue;
        if (unreachable(other)) seen.add(keyOf(other));
        else child = other;
        continue;
      }
      if (frame.lifted) {
        unlift(frame.lifted);
        flip(frame.lifted.op);
        frame.lifted = null;
      }
      const entry = frame.candidates[frame.next++];
      if (!entry) break;
      const states = step(frame.state, ops[entry.op]!, orders);
      if (states.length === 0) continue;
      flip(entry.op);
      lift(entry);
      frame.lifted = entry;
      frame.others = states;
    }
    if (!child) {
      // Nothing linearizable here: back to the choice before.
      stack.pop();
      continue;
    }
    seen.add(keyOf(child));
    if (stack.length > best.count) best = { count: stack.length, linearized: linearized.slice(), state: child };
    if (!head.next) return { verdict: 'ok', best };
    stack.push({ state: child, candidates: candidatesNow(), next: 0, lifted: null, others: [] });
  }
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
  const impossible = start && readOutOfReach(ops, start);
  if (impossible) return { sku, verdict: 'violation', operations: ops.length, steps: 0, window: impossible };
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
 * A read no order of the operations can explain, found before any search: its counters outside what the operations
 * that must come before it (answered before it was sent) and those that may (sent before its answer) can bring them
 * to from the SKU's start. A stale read that misses an acknowledged order is found this way at once, where proving
 * that no linearization explains it would mean trying every one of the orders in flight before it.
 */
function readOutOfReach(ops: Operation[], start: { available: number; reserved: number; sold: number }) {
  const reaches = ops.map(reach);
  for (const read of ops) {
    if (read.answer.kind !== 'read') continue;
    const sentAt = read.invokedAt - (read.lagMs ?? 0);
    const lo = [start.available, start.reserved, start.sold];
    const hi = [...lo];
    ops.forEach((op, i) => {
      if (op === read || op.invokedAt >= read.returnedAt) return;
      const must = op.returnedAt < sentAt;
      reaches[i]!.forEach(([least, most], k) => {
        lo[k]! += must ? least : Math.min(0, least);
        hi[k]! += must ? most : Math.max(0, most);
      });
    });
    const said = [read.answer.available, read.answer.reserved, read.answer.sold];
    if (said.some((v, k) => v < lo[k]! || v > hi[k]!)) {
      const range = (k: number) => `${lo[k]}…${hi[k]}`;
      return {
        from: `the SKU's start, available ${start.available}, reserved ${start.reserved}, sold ${start.sold}; the operations around this read can bring them only to available ${range(0)}, reserved ${range(1)}, sold ${range(2)}`,
        linearizedBefore: 0,
        operations: [read],
      };
    }
  }
  return undefined;
}

/**
 * The smallest window found that cannot be explained: from the furthest point the search reached (its state, after
 * the operations it had linearized), the operations not linearized that were invoked before the first return still
 * pending, or before the next one, until those fail on their own; then, one at a time, every operation whose removal
 * leaves the rest still unexplainable is dropped.
 */
function narrow(ops: Operation[], best: SearchResult['best'], index: OrderIndex, budget: Budget): SkuVerdict['window'] {
  const isLinearized = (i: number) => (best.linearized[i >> 4]! & (1 << (i & 15))) !== 0;
  const pending = ops.filter((_, i) => !isLinearized(i));
  const fails = (candidate: Operation[]) => {
    const probe: Budget = { steps: 0, maxSteps: 200_000, deadline: budget.deadline };
    return search(candidate, best.state, index, probe).verdict === 'violation';
  };
  // The operations invoked before the first pending return, then before each next one, until they fail together.
  const horizons = [...new Set(pending.map((op) => op.returnedAt))].sort((a, b) => a - b);
  let window = pending;
  let failed = false;
  for (const horizon of horizons.slice(0, 20)) {
    window = pending.filter((op) => op.invokedAt - (op.lagMs ?? 0) <= horizon);
    if ((failed = fails(window))) break;
  }
  if (failed) {
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
