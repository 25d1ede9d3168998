import type { CpuUsage } from './infra/cpu-usage.js';
import type { RoundResult } from './runner/round.js';

/** Everything one run measured; written as loadtest/results/<timestamp>.json and read by the report writer. */
export interface RunResults {
  meta: RunMeta;
  ceiling: CeilingCase[];
  segments: SalesCase[];
  cluster: SalesCase[];
  oversell: OversellCase[];
  soldOut: SoldOutCase[];
  /** What the order lifecycle costs: reserve then confirm against placing directly. */
  lifecycle?: LifecycleCase[];
  lockFree: SalesCase[];
  /** What an order costs each server, on one Redis and on a Redis Cluster, with combining on and off. */
  perOrder?: SalesCase[];
  /**
   * What a user would write instead: express + pg, one conditional UPDATE per order (loadtest/alternative), on one
   * hot SKU and on spread and mixed traffic.
   */
  alternative: SalesCase[];
  /** The product on spread traffic (a random SKU of many per request) and mixed (80 % spread, 20 % one hot SKU). */
  spread?: SalesCase[];
  /** A bare express app that parses the JSON body and answers 201: the limit row. */
  bareEcho?: CeilingCase[];
  /** What open dashboards cost the order path. */
  dashboard?: DashboardCase[];
  memory: SalesCase[];
  /** The SKU view and orders with an empty ledger and with a long one. */
  growth: GrowthCase[];
  /** Scenarios not run, and why (e.g. a remote target cannot be given a business step). */
  skipped: { scenario: string; reason: string }[];
  /** Services that died during a case (the case was repeated on a fresh service). */
  incidents: string[];
}

export interface RunMeta {
  startedAt: string;
  finishedAt: string;
  mode: 'quick' | 'full';
  command: string;
  gitCommit: string;
  node: string;
  os: string;
  cpus: { count: number; model: string };
  memoryBytes: number;
  target: string;
  backing: string;
  settings: RunSettings;
}

export interface RunSettings {
  connections: number;
  segmentCounts: number[];
  warmupSeconds: number;
  measureSeconds: number;
  businessStepMs: number;
  clusterInstances: number;
  clusterSegmentCounts: number[];
  memoryConnections: number;
  quantity: number;
  timeoutSeconds: number;
  /** Upper bound on a measured round's requests, whatever the warm-up rate. */
  maxRequestsPerRound: number;
  /** Before a measured round, wait until other processes use at most this many cores (0: do not wait)… */
  quietCores: number;
  /** …but no longer than this. */
  quietMaxWaitSeconds: number;
  /** SKUs of the spread and mixed scenarios (a random one per request). */
  spreadSkus: number;
  /** Share of the mixed scenario's orders that go to its one hot SKU. */
  mixedHotShare: number;
  /** Event streams open in the dashboard scenario's watched round. */
  dashboardWatchers: number;
  /** Stock of each oversell-demonstration SKU; three times as many one-unit orders are sent. */
  oversellStock: number;
  /** Ledger sizes of the growth scenario (0 = empty). */
  growthLedgerRows: number[];
  growthConnections: number;
  /** Requests per round of the growth scenario (SKU view, then orders). */
  growthRequests: number;
  /** A round whose other processes used more than this many cores is marked disturbed in the report. */
  disturbedCores: number;
}

export type Profile = 'real' | 'business-step';

export interface CeilingCase {
  id: string;
  label: string;
  /** Absent: the service's own POST /bench/echo. `/orders` on the bare express echo (the `bare-echo` case). */
  path?: string;
  instances: number;
  measured: RoundResult;
  warmup: RoundResult;
  perSecond: number;
  cpu: CpuUsage | null;
}

export interface SalesCase {
  id: string;
  label: string;
  /** What sells: the product's POST /orders, or a benchmark route. */
  path: string;
  profile: Profile;
  /** Whether the service combined queued orders into one statement per lock hold (COMBINE_MAX_BATCH > 1). */
  combining: boolean;
  instances: number;
  segments: number;
  connections: number;
  quantity: number;
  warmup: RoundResult;
  measured: RoundResult;
  /** Successful orders (201) per second in the steady window. */
  ordersPerSecond: number;
  lock: LockStats | null;
  books: Books;
  warmupBooks: Books;
  memory: MemoryStats | null;
  /** Where the CPU time went during the measured round (local targets only). */
  cpu: CpuUsage | null;
  /** Redis commands and CPU per node, Postgres statements and transactions, per order (the per-order scenario). */
  serverCost?: PerOrderCost;
  /** Which Redis the service used, when the case compares them. */
  redis?: string;
  /** Spread (a random SKU of `skus` per request) or mixed (80 % spread, 20 % one hot SKU); absent: one hot SKU. */
  traffic?: 'spread' | 'mixed';
  skus?: number;
}

/** What the servers did per order during a measured round, counted by the servers themselves. */
export interface PerOrderCost {
  /** Orders (201 answers) the figures are divided by. */
  orders: number;
  redis: {
    /** Every node: commands it ran (a replica's are its primary's writes, replicated) and its CPU. */
    nodes: RedisNodeCost[];
    /** EVALSHA and the like on the primaries: the service's round trips for its locks. */
    scriptCallsPerOrder: number;
    /** Every command the primaries ran, the scripts' inner commands included. */
    commandsOnPrimariesPerOrder: number;
    /** CPU of every node, per order (ms). */
    cpuMsPerOrder: number;
    /** Calls on the primaries per order, by command name, most first. */
    byCommand: Record<string, number>;
  };
  /** From pg_stat_statements; null when it is not loaded. Each statement is one round trip. */
  postgres: {
    statementsPerOrder: number;
    execMsPerOrder: number;
    top: { query: string; perOrder: number; meanMs: number }[];
  } | null;
}

export interface RedisNodeCost {
  address: string;
  role: string;
  commandsPerOrder: number;
  cpuMsPerOrder: number;
}

export interface LockStats {
  /** Orders answered during the measured round, by outcome (placed, out_of_stock, lock_busy, …). */
  outcomes: Record<string, number>;
  lockAttemptsPerOrder: number;
  busyPerOrder: number;
  waitsPerOrder: number;
  /** 99th percentile of segments tried per order (histogram bucket bound). */
  segmentVisitsP99: number;
  meanLockWaitMs: number;
  /** Upper bound of the bucket holding the 99th percentile of the per-order wait. */
  lockWaitP99Ms: number;
  meanHoldMs: number;
  acquisitionsPerSecond: number;
  /** Share of the round's time the locks were held: Σ hold / (duration × segments). */
  lockUtilisation: number;
  fencedOut: number;
  /**
   * The service's event-loop delay over the round (prom-client's nodejs_eventloop_lag_p99_seconds, which restarts at
   * every scrape): how late its timers and I/O callbacks ran, a share of every lock hold. Absent in older results.
   */
  eventLoopLagP99Ms?: number;
}

export interface Books {
  ok: boolean;
  checks: { name: string; ok: boolean; detail: string }[];
  stock: number;
  available: number;
  sold: number;
  /** Σ quantities of 201 answers the load generator saw (exact for measured rounds). */
  answeredUnits: number;
  /** Units sold beyond what the stock went down by (lost updates): sold + available − stock. */
  oversold: number;
}

export interface MemoryStats {
  /** Highest RSS sampled per instance during the measured round. */
  maxRssBytes: number;
  /** Peak RSS per instance since it started (VmHWM). */
  peakRssBytes: number;
}

export interface OversellCase {
  id: string;
  label: string;
  guard: string;
  path: string;
  instances: number;
  stock: number;
  requests: number;
  round: RoundResult;
  books: Books;
}

export interface SoldOutCase {
  id: string;
  label: string;
  segments: number;
  measured: RoundResult;
  warmup: RoundResult;
  refusalsPerSecond: number;
  lockAttemptsPerRequest: number | null;
  cpu: CpuUsage | null;
  restock: { quantity: number; firstOrderStatus: number; firstOrderMs: number; availableAfter: number };
}

export interface DashboardCase {
  watchers: number;
  /** The same measured round without, with, and again without the dashboards' event streams open. */
  rounds: { label: string; round: RoundResult }[];
  /** Stream chunks the least served watcher received during its round: each open dashboard was fed. */
  minEventsPerWatcher: number;
}

export interface LifecycleCase {
  id: string;
  label: string;
  segments: number;
  /** One-unit orders placed confirmed (201). */
  direct: RoundResult;
  /** One-unit reservations (201), each confirmed by the connection's next request (200). */
  reserveThenConfirm: RoundResult;
  /** Orders per second that ended confirmed, in each round. */
  directPerSecond: number;
  confirmedPerSecond: number;
  cpuDirect: CpuUsage | null;
  cpuReserveThenConfirm: CpuUsage | null;
}

export interface GrowthCase {
  id: string;
  label: string;
  ledgerRows: number;
  seedSeconds: number;
  /** `GET /skus/:sku` rounds. */
  skuRead: RoundResult;
  /** One-unit orders on the same SKU. */
  orders: RoundResult;
  /** Sold = seeded + 201 answers, and available + sold = stock, after the rounds. */
  booksOk: boolean;
}
