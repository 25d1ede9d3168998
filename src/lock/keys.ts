/**
 * Every Redis key and channel the service uses is built here. The `{…}` hashtag keeps a segment's lock and its
 * fencing counter in one Redis Cluster slot, as one script touches both. SKU names cannot contain braces.
 */
export interface SegmentRef {
  sku: string;
  layoutVersion: number;
  segment: number;
}

const segmentTag = ({ sku, layoutVersion, segment }: SegmentRef) => `{${sku}/v${layoutVersion}/${segment}}`;

export const redisKeys = {
  segmentLock: (ref: SegmentRef) => `stock:lock:${segmentTag(ref)}`,
  segmentFence: (ref: SegmentRef) => `stock:fence:${segmentTag(ref)}`,
  /** Release notices for every segment of one SKU; the payload names the segment. */
  unlockChannel: (sku: string) => `stock:unlocked:${sku}`,
  /** Restock and re-segmentation notices: instances drop what they cached about the SKU. */
  skuChangedChannel: 'stock:sku-changed',
} as const;

export const unlockNotice = {
  encode: (ref: SegmentRef) => `${ref.layoutVersion}/${ref.segment}`,
};
