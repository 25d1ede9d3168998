import { performance } from 'node:perf_hooks';

/** What a client asked of one SKU. */
export type Call =
  | { kind: 'place'; quantity: number; hold: boolean }
  | { kind: 'confirm'; orderId: string; quantity: number }
  | { kind: 'cancel'; orderId: string; quantity: number }
  /** The expiry sweep ending a reservation: not a client's request; recorded as indeterminate from `expiresAt` on. */
  | { kind: 'expire'; orderId: string; quantity: number }
  | { kind: 'restock'; quantity: number }
  | { kind: 'adjust'; delta: number }
  | { kind: 'resegment'; segments: number }
  /** `GET /skus/:sku`, or the SKU's entry in the listing (`GET /skus`). */
  | { kind: 'read'; via?: 'listing' };

/** Status of an order as its answers name it. */
export type OrderStatus = 'reserved' | 'confirmed' | 'cancelled' | 'expired';

/**
 * What the service answered, in the terms the model checks: `unknown` when no definite answer came (a timeout, a
 * lost connection, a 5xx that may have followed a commit): the operation may or may not have taken effect.
 */
export type Answer =
  | { kind: 'ok' }
  | { kind: 'placed'; orderId: string }
  /** 409 `out_of_stock`, with the availability it reported (undefined if it reported none). */
  | { kind: 'out_of_stock'; available?: number }
  /** The order's status after a confirm (200, or 409 `order_not_reserved`) or a cancel (200). */
  | { kind: 'status'; status: OrderStatus }
  | { kind: 'read'; available: number; reserved: number; sold: number }
  | { kind: 'unknown' };

export interface Operation {
  /** Position in the recording, for the report. */
  id: number;
  sku: string;
  call: Call;
  answer: Answer;
  /** Monotonic milliseconds (performance.now() of the recording process). */
  invokedAt: number;
  /** Infinity for an operation without a definite answer: it may take effect at any time after its invoke. */
  returnedAt: number;
  /** The instance that answered (the last one tried), for the report. */
  target?: string;
  /**
   * How stale the answer may be, for reads that may lag (0 for linearizable ones): the read is checked against any
   * state the SKU was in from `invokedAt - lagMs` on.
   */
  lagMs?: number;
}

/**
 * The recorder of a run: every request logged with its invoke and return times, its call and its answer. An entry
 * is two performance.now() readings and one object: cheap enough to leave on in every fault and load run.
 */
export class History {
  readonly operations: Operation[] = [];
  /** The stock each SKU started with, as created. */
  readonly initial = new Map<string, { available: number; reserved: number; sold: number }>();

  created(sku: string, stock: number): void {
    this.initial.set(sku, { available: stock, reserved: 0, sold: 0 });
  }

  /** Logs the invoke of `call` now; the returned function logs its answer (once) at the time it is called. */
  invoke(sku: string, call: Call, options: { lagMs?: number } = {}): (answer: Answer, target?: string) => Operation {
    const operation: Operation = {
      id: this.operations.length,
      sku,
      call,
      answer: { kind: 'unknown' },
      invokedAt: performance.now(),
      returnedAt: Infinity,
      ...(options.lagMs ? { lagMs: options.lagMs } : {}),
    };
    this.operations.push(operation);
    return (answer, target) => {
      operation.answer = answer;
      operation.returnedAt = answer.kind === 'unknown' ? Infinity : performance.now();
      if (target !== undefined) operation.target = target;
      return operation;
    };
  }

  /** Logs an operation already timed (the expiry sweep's, which no client sees). */
  add(operation: Omit<Operation, 'id'>): Operation {
    const recorded = { ...operation, id: this.operations.length };
    this.operations.push(recorded);
    return recorded;
  }
}

/**
 * The model's reading of an HTTP answer to `POST /orders` for one SKU: 201/200 placed it, 409 `out_of_stock`
 * refused it with the availability it reported; 503 `lock_busy` changed nothing; anything else (no answer, other
 * 5xx) is indeterminate. `null` for an answer that changed nothing and states nothing.
 */
export function orderAnswer(status: number, body: Record<string, unknown> | undefined): Answer | null {
  if ((status === 201 || status === 200) && typeof body?.orderId === 'string') {
    return { kind: 'placed', orderId: body.orderId };
  }
  if (status === 409 && body?.code === 'out_of_stock') {
    return typeof body.available === 'number'
      ? { kind: 'out_of_stock', available: body.available }
      : { kind: 'out_of_stock' };
  }
  if (status === 503 && body?.code === 'lock_busy') return null;
  return { kind: 'unknown' };
}

/** `GET /skus/:sku`'s answer, or the SKU's entry in a page of `GET /skus`, as the model reads it. */
export function readAnswer(status: number, body: Record<string, unknown> | undefined): Answer {
  if (status !== 200 || typeof body?.available !== 'number') return { kind: 'unknown' };
  return { kind: 'read', available: body.available, reserved: Number(body.reserved), sold: Number(body.sold) };
}
