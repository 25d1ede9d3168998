import type { ColumnType, Generated, Selectable } from 'kysely';

/** int8 columns are parsed to numbers (see database.ts); every value this service stores stays below 2^53. */
type Int8 = ColumnType<number, number, number>;
type CreatedAt = ColumnType<Date, Date | undefined, never>;

export interface SkuTable {
  id: Generated<number>;
  sku: string;
  segment_count: number;
  /** Bumped by every re-segmentation; segment rows, lock keys and ledger rows carry it. */
  layout_version: Generated<number>;
  /** Σ stock ever added: the initial stock plus every restock. */
  total_stock: Int8;
  /** Units sold from the segments of layouts replaced by re-segmentation (the current ones count their own). */
  sold_in_earlier_layouts: ColumnType<number, number | undefined, number>;
  /** Units of reservations (live, or confirmed since) taken from the segments of replaced layouts. */
  reserved_in_earlier_layouts: ColumnType<number, number | undefined, number>;
  /** Most units of this SKU one customer's live orders may hold; null: no limit. */
  max_per_customer: number | null;
  /** When orders open (inclusive) and close (exclusive), by the shared clock; null: open on that side. */
  sale_starts_at: ColumnType<Date | null, Date | null | undefined, Date | null>;
  sale_ends_at: ColumnType<Date | null, Date | null | undefined, Date | null>;
  /** The window's edges whose `sku.sale_opened` / `sku.sale_closed` event was written (src/events/sale-edges.ts). */
  sale_start_announced: ColumnType<Date | null, never, Date | null>;
  sale_end_announced: ColumnType<Date | null, never, Date | null>;
  /** Available at or below this is announced as `sku.low_stock`; null: never. */
  low_stock_threshold: ColumnType<number | null, number | null | undefined, number | null>;
  created_at: CreatedAt;
  updated_at: ColumnType<Date, Date | undefined, Date>;
}

export interface StockSegmentTable {
  sku_id: number;
  segment: number;
  layout_version: number;
  available: Int8;
  /** The fencing token of the last lock holder that wrote this row; a write must carry a larger one. */
  fence_token: ColumnType<number, number | undefined, number>;
  /** Units of orders placed confirmed taken from this segment: a running total kept by the statements that change it. */
  sold: ColumnType<number, number | undefined, number>;
  /**
   * Units of reservations taken from this segment, live or confirmed since (a confirmation is counted in
   * `reservation_confirmations`, off this hot row): likewise.
   */
  reserved: ColumnType<number, number | undefined, number>;
}

export interface StockAdditionTable {
  id: Generated<number>;
  sku_id: number;
  /** Signed: only adjustments and counts may be negative. */
  quantity: Int8;
  /** Null on rows of writers that predate it: a create or a restock, named by `reason`. */
  kind: ColumnType<StockChangeKind | null, StockChangeKind | undefined, never>;
  /** An adjustment's or a count's reason; a create's or a restock's kind. */
  reason: string;
  actor: string | null;
  note: string | null;
  reference: string | null;
  /** The SKU's available right after the change; null on rows written before it was kept. */
  available_after: ColumnType<number | null, number | null | undefined, never>;
  created_at: CreatedAt;
}

export type StockChangeKind = 'create' | 'restock' | 'adjustment' | 'count';

export type OrderStatus = 'reserved' | 'confirmed' | 'cancelled' | 'expired';

export interface OrderTable {
  id: string;
  /** Null for a cart: its SKUs are in its ledger rows. */
  sku_id: number | null;
  /** Units over all of the order's SKUs. */
  quantity: Int8;
  idempotency_key: string | null;
  request_fingerprint: string | null;
  status: ColumnType<OrderStatus, OrderStatus | undefined, OrderStatus>;
  customer_id: string | null;
  /** When a reservation lapses; null for orders placed without a hold. */
  expires_at: Date | null;
  /**
   * The `reservation_confirmations` row (slot) a confirmed reservation's units were counted in; null for orders placed
   * without a hold and for confirmations counted on the segments (before that table existed).
   */
  confirmed_slot: number | null;
  created_at: CreatedAt;
}

/** The ledger: one row per segment an order took stock from. */
export interface StockDeductionTable {
  order_id: string;
  sku_id: number;
  segment: number;
  layout_version: number;
  quantity: Int8;
  fence_token: Int8;
}

/** The ledger's other half: one row per segment that a cancelled or expired order's units went back to. */
export interface StockReturnTable {
  order_id: string;
  sku_id: number;
  segment: number;
  layout_version: number;
  quantity: Int8;
  fence_token: Int8;
  reason: 'cancelled' | 'expired';
  created_at: CreatedAt;
}

/**
 * Units of a SKU's confirmed reservations, spread over a few rows (slots) so that confirms do not queue behind one
 * row lock; they are still counted in the segments' `reserved`, so sold = Σ segments' sold + Σ these, and
 * reserved = Σ segments' reserved − Σ these.
 */
export interface ReservationConfirmationTable {
  sku_id: number;
  slot: number;
  units: Int8;
}

/** Units of one customer's live orders of one limited SKU. */
export interface CustomerHoldingTable {
  sku_id: number;
  customer_id: string;
  units: Int8;
}

/** An admin write sent with an Idempotency-Key, with its first answer. */
export interface AdminRequestTable {
  idempotency_key: string;
  request_fingerprint: string;
  status: number;
  response: unknown;
  created_at: CreatedAt;
}

/** A change's event, written in the change's own transaction, until the sequencer moves it into `events`. */
export interface EventOutboxTable {
  id: Generated<number>;
  /** The writing transaction's id (xid8, read as text): the sequencer's order. */
  xid: ColumnType<string, never, never>;
  sku_id: number;
  type: string;
  data: unknown;
  /** What the change did to the SKU's available, reserved and sold. */
  d_available: ColumnType<number, number | undefined, never>;
  d_reserved: ColumnType<number, number | undefined, never>;
  d_sold: ColumnType<number, number | undefined, never>;
  occurred_at: CreatedAt;
}

/** The feed: events in the order the sequencer gave them positions, each with its SKU's sequence and totals. */
export interface EventTable {
  position: Int8;
  sku_id: number;
  sku: string;
  type: string;
  sequence: Int8;
  occurred_at: Date;
  data: unknown;
}

/** Per SKU, the sequencer's last sequence number and the SKU's totals after it. */
export interface EventSkuStateTable {
  sku_id: number;
  last_sequence: Int8;
  available: Int8;
  reserved: Int8;
  sold: Int8;
  low_stock_threshold: Int8 | null;
}

/** The one row whose lock makes its holder the sequencer: the last feed position given. */
export interface EventSequencerTable {
  id: number;
  last_position: Int8;
  /** The (xid, id) of the last outbox row moved (xid8, read as text). */
  last_xid: string;
  last_id: Int8;
}

export interface WebhookTable {
  id: string;
  url: string;
  types: string[];
  skus: string[] | null;
  secret: string;
  enabled: ColumnType<boolean, boolean | undefined, boolean>;
  /** Every event at or before this position was delivered or given up on. */
  cursor: Int8;
  /** Failed attempts at the next event so far, since when it fails, and when it may be tried again. */
  attempts: ColumnType<number, number | undefined, number>;
  failing_since: Date | null;
  next_attempt_at: ColumnType<Date, Date | undefined, Date>;
  created_at: CreatedAt;
}

export interface WebhookDeliveryTable {
  id: Generated<number>;
  webhook_id: string;
  event_id: Int8;
  attempt: number;
  outcome: 'delivered' | 'retrying' | 'failed';
  response_status: number | null;
  error: string | null;
  attempted_at: CreatedAt;
}

/** The books audit's one row (src/audit/): its places in the feed and the sweep, and when it last ran. */
export interface AuditStateTable {
  id: number;
  /** SKUs with events up to this feed position were checked after them. */
  feed_position: Int8;
  /** The sweep over every SKU goes on after this SKU id; 0: a new sweep starts. */
  sweep_after: number;
  sweep_started_at: Date | null;
  /** The sweep's next slice is not due before this (it keeps to its share of the time). */
  sweep_due_at: Date | null;
  last_pass_at: Date | null;
  last_full_pass_started_at: Date | null;
  last_full_pass_at: Date | null;
}

/** A SKU whose books the audit found off: what is off, and the figures it read. */
export interface AuditFindingTable {
  sku_id: number;
  sku: string;
  problems: unknown;
  books: unknown;
  found_at: Date;
  checked_at: Date;
}

export interface Database {
  admin_requests: AdminRequestTable;
  skus: SkuTable;
  stock_segments: StockSegmentTable;
  stock_additions: StockAdditionTable;
  orders: OrderTable;
  stock_deductions: StockDeductionTable;
  stock_returns: StockReturnTable;
  customer_holdings: CustomerHoldingTable;
  reservation_confirmations: ReservationConfirmationTable;
  event_outbox: EventOutboxTable;
  events: EventTable;
  event_sku_state: EventSkuStateTable;
  event_sequencer: EventSequencerTable;
  webhooks: WebhookTable;
  webhook_deliveries: WebhookDeliveryTable;
  audit_state: AuditStateTable;
  audit_findings: AuditFindingTable;
}

export type SkuRow = Selectable<SkuTable>;
