import { isIP } from 'node:net';
import { z } from 'zod';
import { skuName, wholeNumberParameter } from './schemas.js';
import { EVENT_TYPES } from '../events/event-types.js';

/** Request shapes of the feed and of webhooks; strict like every other request shape. */

/** Most events one page of the feed holds. */
export const MAX_PAGE = 1000;

/**
 * A feed position: an event's `id`, or `nextCursor`; 0 is before the first event. At most 2^53 − 1, the last position
 * a JavaScript number holds exactly: a larger one would be rounded, and another position used than the one asked.
 */
export const eventCursor = z
  .string()
  .regex(/^(0|[1-9]\d{0,15})$/, 'must be an event id or a nextCursor value')
  .refine((text) => Number.isSafeInteger(Number(text)), `must be at most ${Number.MAX_SAFE_INTEGER}`);

export const eventType = z.enum(EVENT_TYPES);

/** `types=order.placed,sku.sold_out`: a comma-separated list of event types. */
const typeList = z.preprocess(
  (value) => (typeof value === 'string' ? value.split(',').map((type) => type.trim()) : value),
  z.array(eventType).min(1),
);

const feedFilter = {
  after: eventCursor.optional(),
  sku: skuName.optional(),
  types: typeList.optional(),
};

export const eventsQuery = z.strictObject({
  ...feedFilter,
  limit: wholeNumberParameter(1, MAX_PAGE).default(100),
});

export const eventStreamQuery = z.strictObject(feedFilter);

/** Loopback hosts may be plain http (a receiver on the same machine); every other receiver must be https. */
const LOOPBACK = /^(localhost|127(\.\d{1,3}){3}|\[::1\])$/i;

/**
 * A URL the WHATWG parser reads, as the delivery client will: an IPv6 zone id (`[fe80::1%25eth0]`) is not one. The
 * checks after it run only on such a URL.
 */
/** A user part in a URL's text: `@` before its path, query or fragment (the same rule as migrations/20261204120000). */
const USER_PART = /^[A-Za-z][A-Za-z0-9+.-]*:\/\/[^/?#\\]*@/;

const webhookUrl = z
  .url({ protocol: /^https?$/ })
  .max(2048)
  .refine((url) => URL.canParse(url), { message: 'must be a URL (an IPv6 zone id is not allowed)', abort: true })
  .refine((url) => {
    const { protocol, hostname } = new URL(url);
    return protocol === 'https:' || LOOPBACK.test(hostname) || (isIP(hostname) === 4 && hostname.startsWith('127.'));
  }, 'must be https (plain http only for a loopback receiver)')
  // A password in the URL would be shown back by every GET /webhooks; a receiver checks the signature instead.
  // The text's own authority too, as the table's check reads it: `https://@host` parses with no user, but is refused there.
  .refine((url) => {
    const { username, password } = new URL(url);
    return username === '' && password === '' && !USER_PART.test(url);
  }, 'must not carry credentials (user:password@): receivers check the signature');

const webhookTypes = z
  .array(eventType)
  .min(1)
  .max(EVENT_TYPES.length)
  .refine((types) => new Set(types).size === types.length, 'types must be distinct');

const webhookSkus = z
  .array(skuName)
  .min(1)
  .max(1000)
  .refine((skus) => new Set(skus).size === skus.length, 'SKUs must be distinct');

export const createWebhookBody = z.strictObject({
  url: webhookUrl,
  types: webhookTypes,
  /** Only these SKUs' events; absent: every SKU's. */
  skus: webhookSkus.optional(),
});

/** Any of the fields; `skus: null` lifts the SKU filter, `enabled: false` pauses deliveries. */
export const updateWebhookBody = z
  .strictObject({
    url: webhookUrl.optional(),
    types: webhookTypes.optional(),
    skus: webhookSkus.nullable().optional(),
    enabled: z.boolean().optional(),
  })
  .refine((body) => Object.keys(body).length > 0, 'give at least one of url, types, skus, enabled');

/** Delivers again every matching event after this cursor (0: everything still kept). */
export const replayWebhookBody = z.strictObject({ after: eventCursor });

export const webhookId = z.uuid();

export const deliveriesQuery = z.strictObject({
  limit: wholeNumberParameter(1, MAX_PAGE).default(100),
});
