import type { SegmentRef } from './keys.js';

/**
 * A segment's lock name on every backend: `<sku>/v<layoutVersion>/<segment>`. SKU names cannot contain '/', so the
 * name reads back unambiguously (the Redis keyspace needs the SKU to pick the unlock channel).
 */
export function segmentLockName({ sku, layoutVersion, segment }: SegmentRef): string {
  return `${sku}/v${layoutVersion}/${segment}`;
}

export function segmentRefOf(name: string): SegmentRef | undefined {
  const match = /^(.+)\/v(\d+)\/(\d+)$/.exec(name);
  return match ? { sku: match[1]!, layoutVersion: Number(match[2]), segment: Number(match[3]) } : undefined;
}
