/**
 * Every Redis key and channel the service uses is built here, and nowhere else.
 *
 * A lock's keys and channels share one `{hashtag}`, the lock's name, so one script can touch them all and, on a
 * Redis Cluster, they live in one slot: the scripts publish their notices (SPUBLISH) on shard channels of that slot.
 * Each segment of a SKU (and layout) is a lock of its own, with a hash tag of its own, so a hot SKU's segments spread
 * over the shards. On a Cluster, nothing spans two segments in one call: work over several segments takes their
 * locks one call each, in ascending segment order. On one Redis server, where slots do not matter, an order batch's
 * attempts and releases each go in one script call (lockTryMany, lockReleaseMany). SKU names cannot contain braces.
 */
export const redisKeys = {
  /** The lock's hash {owner, count, fence}. */
  lock: (name: string) => `lock:{${name}}`,
  /** The last fencing token issued for the lock; outlives the lock itself. */
  fence: (name: string) => `lock:fence:{${name}}`,
  /**
   * The four keys the acquire and release scripts take, in their KEYS order: the lock, its fencing counter, and fair
   * mode's FIFO queue of waiters with the time by which each must poll again.
   */
  scriptKeys: (name: string) =>
    [`lock:{${name}}`, `lock:fence:{${name}}`, `lock:queue:{${name}}`, `lock:queue-deadlines:{${name}}`] as const,
  /** Published when the lock is freed; the payload names the releasing lock client. */
  releasedChannel: (name: string) => `lock:released:{${name}}`,
  /** Published when a release hands the lock to the head of the fair queue; the payload names the new owner. */
  grantedChannel: (name: string) => `lock:granted:{${name}}`,
  /**
   * The lock name of one segment of one layout of a SKU (the order flow's SegmentRef). Joined rather than a template:
   * an instance keeps this name for every segment it has served, and a template literal leaves it as a chain of pieces
   * several times the size of the one flat string `join` makes.
   */
  segmentLock: ({ sku, layoutVersion, segment }: { sku: string; layoutVersion: number; segment: number }) =>
    ['stock', sku, `v${layoutVersion}`, segment].join('/'),
  /**
   * Restock and re-segmentation notices: instances drop what they cached about the SKU. One shard channel for all
   * SKUs, since every instance listens to every SKU's changes; they are rare (admin writes), so one shard carries them.
   */
  skuChangedChannel: 'stock:sku-changed',
  /** The key whose node's clock is the shared clock (sale windows): every instance reads the same node's TIME. */
  clock: 'clock',
  /**
   * The fleet's per-second series (src/metrics/fleet-series.ts): one hash per scope (`all`, or `sku:<name>`) and block
   * of seconds, the instances' heartbeats and the sorted set listing them. All in the `{fleet}` slot, so a flush or a
   * read is one pipeline on a Cluster too. Monitoring, not stock: nothing on the order path reads them.
   */
  fleetPrefix: '{fleet}:',
  fleetBlock: (scope: { sku: string } | 'all', block: number) =>
    scope === 'all' ? `{fleet}:all:${block}` : `{fleet}:sku:${scope.sku}:${block}`,
  fleetInstances: '{fleet}:instances',
  fleetInstance: (id: string) => `{fleet}:instance:${id}`,
} as const;
