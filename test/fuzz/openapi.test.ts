import { randomBytes } from 'node:crypto';
import fc from 'fast-check';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '../../src/db/database.js';
import { errorCatalog } from '../../src/errors.js';
import { createOwnDatabase, type OwnDatabase } from '../support/own-database.js';
import { call, ServiceProcess, uniqueSku } from '../support/service.js';

/**
 * Requests generated from the served OpenAPI document: for every operation, path and query parameters and JSON bodies
 * drawn from its own schemas, each value now and then replaced by something hostile (NUL and non-UTF-8 bytes, dot
 * segments, numbers past 2^53, dates of year 0, values the service gave back with their bytes altered, internal
 * addresses in every IPv6 form), sent one after another to a service process, so one request's write meets the next
 * one's read. Every answer is below 500, every 4xx a problem document with a known code, a refused write changes
 * nothing, what a 201 says it created can be read back at its `Location`, and an internal webhook destination is never
 * saved. Bounded by time: FUZZ_OPENAPI_SECONDS (default 25) of requests; FUZZ_SEED=<n> replays a run.
 */

const ADMIN_TOKEN = `fuzz-admin-${randomBytes(12).toString('hex')}`;
const SECONDS = Number(process.env.FUZZ_OPENAPI_SECONDS ?? 25);
const seed = process.env.FUZZ_SEED === undefined ? undefined : Number(process.env.FUZZ_SEED);
const KNOWN_CODES = new Set(Object.keys(errorCatalog));

type Schema = Record<string, unknown> & {
  $ref?: string;
  type?: string;
  enum?: unknown[];
  anyOf?: Schema[];
  oneOf?: Schema[];
  properties?: Record<string, Schema>;
  required?: string[];
  items?: Schema;
  pattern?: string;
  format?: string;
  minimum?: number;
  maximum?: number;
  minLength?: number;
  maxLength?: number;
  minItems?: number;
  maxItems?: number;
};
interface Parameter {
  name: string;
  in: 'path' | 'query' | 'header';
  required?: boolean;
  schema: Schema;
}
interface Operation {
  method: string;
  path: string;
  parameters: Parameter[];
  body?: Schema;
}
interface Request {
  method: string;
  path: string;
  headers: Record<string, string>;
  body?: string;
}

/**
 * Values the service gave back (names, ids, cursors), by the key they came under: a parameter or field is drawn from
 * those of its own name (a `cursor` from `nextCursor`s) as often as from its schema, so that it reaches real rows.
 */
const seen = new Map<string, string[]>();
const KEYS_OF: Record<string, string[]> = {
  sku: ['sku'],
  prefix: ['sku'],
  skus: ['sku'],
  id: ['id', 'orderId', 'ticketId'],
  cursor: ['nextCursor'],
  after: ['deliveredThrough', 'nextCursor'],
  customerId: ['customerId'],
};
const remember = (key: string, value: unknown) => {
  if (typeof value !== 'string' || value.length > 200) return;
  const values = seen.get(key) ?? [];
  if (values.includes(value)) return;
  if (values.length >= 50) values.splice(0, 1);
  values.push(value);
  seen.set(key, values);
};
const harvest = (body: unknown, depth = 0): void => {
  if (depth > 4 || body === null || typeof body !== 'object') return;
  for (const [key, value] of Object.entries(body)) {
    remember(key, value);
    harvest(value, depth + 1);
  }
};
const seenValue = (name: string) =>
  fc.nat().map((n) => {
    const keys = KEYS_OF[name] ?? [...seen.keys()];
    const values = keys.flatMap((key) => seen.get(key) ?? []);
    return values.length === 0 ? '' : values[n % values.length]!;
  });

/** Bytes no text field should carry, and bytes that end quotes and escapes. */
const HOSTILE_BYTES = [0x00, 0x00, 0x00, 0xff, 0xfe, 0x80, 0xc0, 0x22, 0x27, 0x5c, 0x25, 0x0a, 0x20];

/** A value the service gave back with its bytes altered: base64url ones decoded, changed and encoded again. */
const alteredSeen = (name: string) =>
  fc
    .tuple(
      seenValue(name),
      fc.constantFrom(...HOSTILE_BYTES),
      fc.nat(),
      fc.constantFrom('insert', 'replace', 'cut', 'text'),
    )
    .map(([value, byte, at, how]) => {
      const base64 = /^[A-Za-z0-9_-]+$/.test(value);
      const bytes = base64 ? Buffer.from(value, 'base64url') : Buffer.from(value);
      const i = bytes.length === 0 ? 0 : at % bytes.length;
      let altered: Buffer;
      if (how === 'insert') altered = Buffer.concat([bytes.subarray(0, i), Buffer.from([byte]), bytes.subarray(i)]);
      else if (how === 'replace')
        altered = Buffer.concat([bytes.subarray(0, i), Buffer.from([byte]), bytes.subarray(i + 1)]);
      else if (how === 'cut') altered = bytes.subarray(0, i);
      else return `${value}${String.fromCharCode(byte)}`;
      return base64 ? altered.toString('base64url') : altered.toString('latin1');
    });

const hostileConstant = fc.constantFrom(
  '',
  '.',
  '..',
  '\u0000',
  'a\u0000b',
  '%',
  '\ud800',
  '\u202e',
  '__proto__',
  "'; select 1; --",
  '-1',
);
const hostileString = fc.oneof(
  hostileConstant,
  fc.string({ unit: 'binary', maxLength: 20 }),
  fc.string({ minLength: 201, maxLength: 400 }),
  alteredSeen(''),
);

/** Instants from year 0 to 9999, at every offset a zone may have: a window far in the past or future must not break. */
const dateTime = fc
  .record({
    year: fc.oneof(fc.integer({ min: 0, max: 9999 }), fc.constantFrom(0, 1, 1999, 2000, 2026, 9999)),
    month: fc.integer({ min: 1, max: 12 }),
    day: fc.integer({ min: 1, max: 28 }),
    time: fc.constantFrom('00:00:00', '12:34:56.789', '23:59:59'),
    zone: fc.constantFrom('Z', '+14:00', '-14:00', '+05:30', '+00:00'),
  })
  .map(({ year, month, day, time, zone }) => {
    const two = (n: number) => String(n).padStart(2, '0');
    return `${String(year).padStart(4, '0')}-${two(month)}-${two(day)}T${time}${zone}`;
  });

/** Internal IPv4 addresses, bare and in every IPv6 form that carries one: a webhook aimed at one must be refused. */
const INTERNAL_HOSTS = ['127.0.0.1', '10.1.2.3', '169.254.169.254', '192.168.0.1'].flatMap((v4) => {
  const hex = v4
    .split('.')
    .map((octet) => Number(octet).toString(16).padStart(2, '0'))
    .join('');
  const pair = `${hex.slice(0, 4)}:${hex.slice(4)}`;
  return [
    v4,
    `[::ffff:${v4}]`,
    `[::${v4}]`,
    `[::${pair}]`,
    `[64:ff9b::${v4}]`,
    `[2002:${pair}::1]`,
    `[2600::5efe:${v4}]`,
    `[2600::200:5efe:${pair}]`,
  ];
});
const webhookUrl = fc.oneof(
  fc.constantFrom('https://8.8.8.8/in', 'https://[2606:4700:4700::1111]/hook'),
  fc.constantFrom(...INTERNAL_HOSTS).map((host) => `https://${host}/in`),
  fc.constantFrom('https://[::1%25lo]/x', 'https://[fe80::1%25eth0]/x', 'https://[fe80::1%eth0]/', 'http://8.8.8.8/'),
  hostileString.map((s) => `https://${s}/`),
);
const isInternalUrl = (url: unknown) =>
  typeof url === 'string' && INTERNAL_HOSTS.some((host) => url.startsWith(`https://${host}/`));

/** A JSON number literal past 2^53: the body carries it as written, not as the double it rounds to. */
const BIG = (digits: string) => `\u0001big:${digits}\u0001`;
const bigInteger = fc.constantFrom('9007199254740993', '999999999999999999', '18446744073709551617').map(BIG);
const toBodyText = (value: unknown) => JSON.stringify(value).replace(/"\\u0001big:(\d+)\\u0001"/g, '$1');

const anyHostile = fc.oneof(
  hostileString,
  bigInteger,
  fc.constantFrom(null, true, -1, 0, 0.5, 1e308, -0, [], {}, [1], { a: 1 }),
);

function resolve(doc: { components: { schemas: Record<string, Schema> } }, schema: Schema): Schema {
  if (schema.$ref === undefined) return schema;
  return resolve(doc, doc.components.schemas[schema.$ref.split('/').at(-1)!]!);
}

/** Values of `schema`, and now and then a hostile one in its place (at every depth). */
function fromSchema(doc: Parameters<typeof resolve>[0], raw: Schema, name = ''): fc.Arbitrary<unknown> {
  const schema = resolve(doc, raw);
  const valid = validFromSchema(doc, schema, name);
  return fc.oneof({ weight: 5, arbitrary: valid }, { weight: 1, arbitrary: anyHostile });
}

function validFromSchema(doc: Parameters<typeof resolve>[0], schema: Schema, name: string): fc.Arbitrary<unknown> {
  const choices = schema.anyOf ?? schema.oneOf;
  if (choices) return fc.oneof(...choices.map((choice) => fromSchema(doc, choice, name)));
  if (schema.enum) return fc.constantFrom(...schema.enum);
  switch (schema.type) {
    case 'null':
      return fc.constant(null);
    case 'boolean':
      return fc.boolean();
    case 'integer': {
      const min = schema.minimum ?? -(2 ** 31);
      const max = Math.min(schema.maximum ?? 2 ** 31, Number.MAX_SAFE_INTEGER);
      return fc.oneof(
        { weight: 4, arbitrary: fc.integer({ min, max: Math.min(max, min + 50) }) },
        { weight: 2, arbitrary: fc.integer({ min, max }) },
        { weight: 2, arbitrary: fc.constantFrom(min, max, min - 1, max + 1, max + 0.5) },
        { weight: 1, arbitrary: bigInteger },
      );
    }
    case 'number':
      return fc.double({ noNaN: true });
    case 'array':
      return fc.array(fromSchema(doc, schema.items ?? {}, name), {
        minLength: schema.minItems ?? 0,
        maxLength: Math.max(schema.minItems ?? 0, Math.min(schema.maxItems ?? 4, 4)),
      });
    case 'object': {
      const properties = Object.fromEntries(
        Object.entries(schema.properties ?? {}).map(([key, value]) => [key, fromSchema(doc, value, key)]),
      );
      return fc.record(properties, { requiredKeys: schema.required ?? [] });
    }
    case 'string':
      return stringFromSchema(schema, name);
    default:
      return fc.jsonValue({ maxDepth: 2 });
  }
}

function stringFromSchema(schema: Schema, name: string): fc.Arbitrary<string> {
  if (name === 'url' || schema.format === 'uri') return webhookUrl;
  if (schema.format === 'date-time') return dateTime;
  const fromPattern =
    schema.format === 'uuid'
      ? fc.uuid()
      : schema.pattern !== undefined
        ? fc.stringMatching(new RegExp(schema.pattern))
        : fc.string({ minLength: schema.minLength ?? 0, maxLength: Math.min(schema.maxLength ?? 40, 40) });
  // Names, ids and cursors the service gave back reach its rows; drawn from the pattern alone, they rarely would.
  return fc.oneof(
    { weight: 2, arbitrary: fromPattern },
    { weight: 3, arbitrary: seenValue(name) },
    { weight: 2, arbitrary: alteredSeen(name) },
    { weight: 1, arbitrary: hostileConstant },
  );
}

/** A path or query value as a client would encode it, or with raw percent-encoded bytes no URL parser checks. */
const encodedValue = (value: fc.Arbitrary<unknown>) =>
  fc.oneof(
    { weight: 6, arbitrary: value.map((v) => encodeSafely(typeof v === 'string' ? v : (JSON.stringify(v) ?? ''))) },
    { weight: 1, arbitrary: fc.constantFrom('%00', '%FF', '%C0%AE%C0%AE', '%2e%2e', '%2F', '%', '%E0%A4%A') },
  );
function encodeSafely(text: string): string {
  try {
    return encodeURIComponent(text);
  } catch {
    return '%ED%A0%80'; // a lone surrogate, as its UTF-8-like bytes
  }
}

function requestOf(doc: Parameters<typeof resolve>[0], op: Operation): fc.Arbitrary<Request> {
  const pathValues = op.parameters.filter((p) => p.in === 'path');
  const queryValues = op.parameters.filter((p) => p.in === 'query');
  const headerValues = op.parameters.filter((p) => p.in === 'header');
  return fc
    .record({
      path: fc.tuple(...pathValues.map((p) => encodedValue(fromSchema(doc, p.schema, p.name)))),
      query: fc.tuple(
        ...queryValues.map((p) => fc.option(encodedValue(fromSchema(doc, p.schema, p.name)), { freq: 2 })),
      ),
      headers: fc.tuple(
        ...headerValues.map((p) =>
          fc.option(
            fromSchema(doc, p.schema, p.name).filter((v) => typeof v === 'string' && /^[\x20-\x7e]*$/.test(v)),
            { freq: 2 },
          ),
        ),
      ),
      body: op.body === undefined ? fc.constant(undefined) : fromSchema(doc, op.body).map(toBodyText),
    })
    .map(({ path, query, headers, body }) => {
      let url = op.path;
      pathValues.forEach((p, i) => (url = url.replace(`{${p.name}}`, path[i]!)));
      const pairs = queryValues.flatMap((p, i) => (query[i] === null ? [] : [`${p.name}=${query[i]}`]));
      const named: Record<string, string> = { authorization: `Bearer ${ADMIN_TOKEN}` };
      headerValues.forEach((p, i) => {
        if (headers[i] !== null) named[p.name] = headers[i] as string;
      });
      if (body !== undefined) named['content-type'] = 'application/json';
      return { method: op.method, path: pairs.length > 0 ? `${url}?${pairs.join('&')}` : url, headers: named, body };
    });
}

describe('requests generated from the OpenAPI document', () => {
  let own: OwnDatabase;
  let db: Db;
  let service: ServiceProcess;
  let operations: Operation[];
  let doc: Parameters<typeof resolve>[0] & { paths: Record<string, Record<string, unknown>> };
  const recent: string[] = [];

  beforeAll(async () => {
    own = await createOwnDatabase('fuzz_openapi');
    expect((await own.migrator.migrateToLatest()).error).toBeUndefined();
    db = own.db;
    service = await ServiceProcess.spawn({
      ADMIN_TOKEN,
      DATABASE_URL: own.url,
      LOG_LEVEL: 'warn',
      MAX_ORDER_QUANTITY: '50',
      WEBHOOK_BACKOFF_BASE_MS: '3600000',
      WEBHOOK_TIMEOUT_MS: '1000',
    });
    const admin = { authorization: `Bearer ${ADMIN_TOKEN}` };
    // Something for every kind of id to point at: SKUs (one with a line), an order, a ticket, a webhook, cursors.
    const skus = [uniqueSku('fz'), uniqueSku('fz'), uniqueSku('fz')];
    for (const sku of skus) {
      expect((await call(service.url, 'POST', '/skus', { sku, stock: 1000, segments: 2 }, admin)).status).toBe(201);
    }
    expect((await call(service.url, 'PUT', `/skus/${skus[2]}/line`, { capacity: 50 }, admin)).status).toBe(200);
    const seeds = [
      await call(service.url, 'POST', '/orders', { sku: skus[0], quantity: 1, holdSeconds: 3600, customerId: 'c1' }),
      await call(service.url, 'POST', `/skus/${skus[2]}/line`, { customerId: 'c2' }, admin),
      await call(service.url, 'POST', '/webhooks', { url: 'https://8.8.8.8/in', types: ['sku.created'] }, admin),
      await call(service.url, 'GET', '/skus?limit=1', undefined, admin),
      await call(service.url, 'GET', '/orders?customerId=c1&limit=1', undefined, admin),
    ];
    for (const answer of seeds) {
      expect(answer.status, JSON.stringify(answer.body)).toBeLessThan(300);
      harvest(answer.body);
    }
    doc = (await call(service.url, 'GET', '/openapi.json')).body;
    operations = Object.entries(doc.paths).flatMap(([path, methods]) =>
      Object.entries(methods).flatMap(([method, raw]) => {
        const op = raw as {
          parameters?: Parameter[];
          requestBody?: { content: Record<string, { schema: Schema }> };
          responses: Record<string, { content?: Record<string, unknown> }>;
        };
        // Streams never end: their own tests read them.
        const streams = Object.values(op.responses).some((r) =>
          Object.keys(r.content ?? {}).includes('text/event-stream'),
        );
        if (streams) return [];
        const body = op.requestBody?.content['application/json']?.schema;
        return [{ method: method.toUpperCase(), path, parameters: op.parameters ?? [], ...(body && { body }) }];
      }),
    );
  });
  afterAll(async () => {
    await service?.stop();
    await own?.drop();
  });

  /** What a request may change; what the service's own jobs change meanwhile (expiries, admissions, deliveries) is left out. */
  const state = async () =>
    (
      await sql<Record<string, string>>`
        select (select string_agg(concat_ws('|', sku, segment_count, total_stock, max_per_customer, low_stock_threshold,
                                            sale_starts_at, sale_ends_at), ';' order by sku collate "C") from skus) as skus,
               (select count(*) from orders where status in ('confirmed', 'cancelled')) as ended,
               (select count(*) from stock_additions) as additions,
               (select string_agg(concat_ws('|', id, url, types::text, skus::text, enabled), ';' order by id)
                  from webhooks) as webhooks,
               (select count(*) from sku_lines) as lines,
               (select count(*) from line_tickets) as tickets`.execute(db)
    ).rows[0]!;

  const send = async (r: Request) => {
    const response = await fetch(`${service.url}${r.path}`, {
      method: r.method,
      headers: r.headers,
      body: r.body,
      redirect: 'manual',
      signal: AbortSignal.timeout(15_000),
    });
    const text = await response.text();
    return { status: response.status, headers: response.headers, text };
  };

  it(`answers every generated request below 500, refusals as problems that change nothing (${SECONDS} s)`, async () => {
    let sent = 0;
    const request = fc.constantFrom(...operations).chain((op) => requestOf(doc, op));
    await fc.assert(
      fc.asyncProperty(request, async (r) => {
        sent++;
        const line = `${r.method} ${r.path} ${r.body?.slice(0, 200) ?? ''}`;
        recent.push(line);
        if (recent.length > 15) recent.shift();
        const writes = r.method !== 'GET';
        const before = writes ? await state() : undefined;
        const answer = await send(r);
        const context = `${line} → ${answer.status} ${answer.text.slice(0, 300)}\nthe requests before:\n${recent.join('\n')}`;
        expect(answer.status, context).toBeLessThan(500);
        const json = answer.headers.get('content-type')?.includes('json') ? tryParse(answer.text) : undefined;
        if (answer.status >= 400) {
          expect(answer.headers.get('content-type'), context).toMatch(/^application\/problem\+json/);
          const problem = json as { status?: number; code?: string; title?: unknown; detail?: unknown };
          expect(problem.status, context).toBe(answer.status);
          expect(KNOWN_CODES.has(problem.code ?? ''), context).toBe(true);
          expect(typeof problem.title === 'string' && typeof problem.detail === 'string', context).toBe(true);
          if (before) expect(await state(), `a refusal changed something: ${context}`).toEqual(before);
          return;
        }
        harvest(json);
        if (r.path.startsWith('/webhooks') && r.method !== 'GET') {
          const asked = (tryParse(r.body ?? '') as { url?: unknown } | undefined)?.url;
          expect(isInternalUrl(asked), `an internal destination was saved: ${context}`).toBe(false);
        }
        const location = answer.headers.get('location');
        if (answer.status === 201 && location !== null) {
          // As a browser or fetch would follow it: what was created must be found there.
          const found = await fetch(new URL(location, service.url), {
            headers: { authorization: r.headers.authorization! },
          });
          expect(found.status, `${context}\nLocation ${location} → ${found.status}`).toBe(200);
        }
      }),
      {
        numRuns: Number.MAX_SAFE_INTEGER,
        interruptAfterTimeLimit: SECONDS * 1000,
        markInterruptAsFailure: false,
        ...(seed !== undefined && { seed }),
      },
    );
    console.log(`[fuzz:openapi] ${sent} requests over ${operations.length} operations`);
    expect(sent).toBeGreaterThan(100);
    expect(service.child.exitCode).toBeNull();
  }, 300_000);
});

function tryParse(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}
