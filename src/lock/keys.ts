/**
 * Every Redis key and channel the service uses is built here, and nowhere else.
 *
 * A lock's keys and channels share one `{hashtag}`, the lock's name, so one script can touch them all and, on a
 * Redis Cluster, they live in one slot (sharded pub/sub can then publish its notices from the script). Each segment of
 * a SKU is a lock of its own, so a hot SKU's segments spread over the shards. SKU names cannot contain braces.
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
  /** Published when the lock is freed; the payload names the releasing process. */
  releasedChannel: (name: string) => `lock:released:{${name}}`,
  /** Published when a release hands the lock to the head of the fair queue; the payload names the new owner. */
  grantedChannel: (name: string) => `lock:granted:{${name}}`,
  /** The lock name of one segment of one layout of a SKU (the order flow's SegmentRef). */
  segmentLock: ({ sku, layoutVersion, segment }: { sku: string; layoutVersion: number; segment: number }) =>
    `stock/${sku}/v${layoutVersion}/${segment}`,
  /** Restock and re-segmentation notices: instances drop what they cached about the SKU. */
  skuChangedChannel: 'stock:sku-changed',
} as const;
