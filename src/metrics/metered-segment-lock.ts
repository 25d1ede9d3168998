import type { SegmentRef } from '../lock/keys.js';
import { type Lease, SegmentLock } from '../lock/segment-lock.js';
import type { ServiceMetrics } from './service-metrics.js';

/**
 * The segment lock, unchanged, timing how long each lease is held: the figure that says how well a contended lock
 * is used (hold time × acquisitions per second = the share of time it is busy).
 */
export class MeteredSegmentLock extends SegmentLock {
  private readonly acquiredAt = new WeakMap<Lease, number>();

  constructor(
    private readonly metrics: ServiceMetrics,
    ...lock: ConstructorParameters<typeof SegmentLock>
  ) {
    super(...lock);
  }

  override async tryAcquire(ref: SegmentRef): Promise<Lease | null> {
    const lease = await super.tryAcquire(ref);
    if (lease) {
      this.acquiredAt.set(lease, performance.now());
      this.metrics.lockAcquired();
    }
    return lease;
  }

  override release(lease: Lease): Promise<boolean> {
    const acquiredAt = this.acquiredAt.get(lease);
    if (acquiredAt !== undefined) {
      this.acquiredAt.delete(lease);
      this.metrics.lockReleased(performance.now() - acquiredAt);
    }
    return super.release(lease);
  }
}
