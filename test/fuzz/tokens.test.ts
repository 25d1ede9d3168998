import { createHash } from 'node:crypto';
import fc from 'fast-check';
import { exportSPKI, generateKeyPair, importJWK, type JWTPayload, SignJWT, UnsecuredJWT } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { auditSku, booksViolations } from '../support/invariants.js';
import { call, type RunningService, startService, uniqueSku } from '../support/service.js';
import { AUDIENCE, bearer, ISSUER, serviceKey, TestIssuer, writeKeysFile } from '../security/credentials.js';

/**
 * Bad customer tokens by the thousand: malformed, expired, not yet valid, of another issuer or audience, unsigned
 * (`alg: none`), HMAC-signed with the issuer's public key (HS/RS confusion), signed by another key, tampered with.
 * Each is answered 401 `invalid_token`, and nothing changes. Count-based: a fixed number of tokens from a fixed seed
 * (FUZZ_SEED=<n> picks another).
 */

const seed = process.env.FUZZ_SEED === undefined ? 19 : Number(process.env.FUZZ_SEED);
const CUSTOMER = 'fuzz-customer';
const now = () => Math.floor(Date.now() / 1000);
const b64 = (value: unknown) =>
  Buffer.from(typeof value === 'string' ? value : JSON.stringify(value)).toString('base64url');

/** What a bad token is; turned into a token by `mint`. */
type Spec =
  | { kind: 'garbage'; text: string }
  | { kind: 'three-parts'; parts: [string, string, string] }
  | { kind: 'json-parts'; header: Record<string, unknown>; payload: Record<string, unknown> }
  | { kind: 'expired'; ago: number }
  | { kind: 'not-yet-valid'; ahead: number }
  | { kind: 'issuer'; issuer: string }
  | { kind: 'audience'; audience: string }
  | { kind: 'none'; claims: boolean }
  | { kind: 'hs-with-public-key'; form: 'pem' | 'jwk' | 'n' }
  | { kind: 'wrong-key'; sameKid: boolean }
  | { kind: 'tampered'; sub: string }
  | { kind: 'missing'; claim: 'exp' | 'sub' | 'iss' | 'aud' }
  | { kind: 'bad-sub'; sub: string }
  | { kind: 'truncated'; cut: number };

const base64url = fc.stringMatching(/^[A-Za-z0-9_-]{0,80}$/);
const otherString = fc.string({ minLength: 1, maxLength: 40 }).filter((s) => s !== ISSUER && s !== AUDIENCE);
const specs: fc.Arbitrary<Spec> = fc.oneof(
  fc.record({ kind: fc.constant('garbage' as const), text: fc.stringMatching(/^[\x21-\x7e]{1,300}$/) }),
  fc.record({ kind: fc.constant('three-parts' as const), parts: fc.tuple(base64url, base64url, base64url) }),
  fc.record({
    kind: fc.constant('json-parts' as const),
    header: fc.dictionary(fc.constantFrom('alg', 'typ', 'kid', 'crit', 'jku', 'x5u'), fc.jsonValue()),
    payload: fc.dictionary(fc.constantFrom('sub', 'iss', 'aud', 'exp', 'nbf', 'iat'), fc.jsonValue()),
  }),
  fc.record({ kind: fc.constant('expired' as const), ago: fc.integer({ min: 31, max: 10_000_000 }) }),
  fc.record({ kind: fc.constant('not-yet-valid' as const), ahead: fc.integer({ min: 31, max: 10_000_000 }) }),
  fc.record({ kind: fc.constant('issuer' as const), issuer: otherString }),
  fc.record({ kind: fc.constant('audience' as const), audience: otherString }),
  fc.record({ kind: fc.constant('none' as const), claims: fc.boolean() }),
  fc.record({ kind: fc.constant('hs-with-public-key' as const), form: fc.constantFrom('pem', 'jwk', 'n') }),
  fc.record({ kind: fc.constant('wrong-key' as const), sameKid: fc.boolean() }),
  fc.record({ kind: fc.constant('tampered' as const), sub: fc.stringMatching(/^[A-Za-z0-9]{1,20}$/) }),
  fc.record({ kind: fc.constant('missing' as const), claim: fc.constantFrom('exp', 'sub', 'iss', 'aud') }),
  fc
    .record({ kind: fc.constant('bad-sub' as const), sub: fc.string({ minLength: 0, maxLength: 200 }) })
    .filter(({ sub }) => !/^[A-Za-z0-9._:@-]{1,128}$/.test(sub)),
  fc.record({ kind: fc.constant('truncated' as const), cut: fc.integer({ min: 1, max: 200 }) }),
);

describe('bad customer tokens', () => {
  let issuer: TestIssuer;
  let stranger: CryptoKey;
  let publicPem: string;
  let svc: RunningService;
  let sku: string;
  let order: string;
  const ops = serviceKey('ops', ['orders:place', 'orders:read', 'orders:manage', 'stock:admin']);

  /** A token as the issuer would sign it, with `claims` over the usual ones (undefined removes one). */
  const signed = (claims: Record<string, unknown>, key: CryptoKey | Uint8Array = issuer.privateKey, alg = 'RS256') => {
    const payload: JWTPayload = { sub: CUSTOMER, iss: ISSUER, aud: AUDIENCE, iat: now(), exp: now() + 3600, ...claims };
    for (const [name, value] of Object.entries(payload)) if (value === undefined) delete payload[name];
    return new SignJWT(payload).setProtectedHeader({ alg, kid: issuer.kid }).sign(key);
  };

  async function mint(spec: Spec): Promise<string> {
    switch (spec.kind) {
      case 'garbage':
        return spec.text;
      case 'three-parts':
        return spec.parts.join('.');
      case 'json-parts':
        return `${b64(spec.header)}.${b64(spec.payload)}.${b64('signature')}`;
      case 'expired':
        return signed({ iat: now() - spec.ago - 60, exp: now() - spec.ago });
      case 'not-yet-valid':
        return signed({ nbf: now() + spec.ahead });
      case 'issuer':
        return signed({ iss: spec.issuer });
      case 'audience':
        return signed({ aud: spec.audience });
      case 'none': {
        const claims = spec.claims ? { sub: CUSTOMER, iss: ISSUER, aud: AUDIENCE, exp: now() + 3600 } : {};
        return new UnsecuredJWT(claims).encode();
      }
      case 'hs-with-public-key': {
        const secret =
          spec.form === 'pem'
            ? publicPem
            : spec.form === 'jwk'
              ? JSON.stringify(issuer.publicJwk)
              : issuer.publicJwk.n!;
        return signed({}, new TextEncoder().encode(secret), 'HS256');
      }
      case 'wrong-key':
        return spec.sameKid
          ? signed({}, stranger)
          : new SignJWT({ sub: CUSTOMER, iss: ISSUER, aud: AUDIENCE, exp: now() + 3600 })
              .setProtectedHeader({ alg: 'RS256', kid: 'not-a-key-of-the-issuer' })
              .sign(stranger);
      case 'tampered': {
        const [header, , signature] = (await signed({})).split('.');
        const payload = { sub: spec.sub, iss: ISSUER, aud: AUDIENCE, exp: now() + 3600 };
        return `${header}.${b64(payload)}.${signature}`;
      }
      case 'missing':
        return signed({ [spec.claim]: undefined });
      case 'bad-sub':
        return signed({ sub: spec.sub });
      case 'truncated': {
        const token = await signed({});
        return token.slice(0, Math.max(1, token.length - spec.cut));
      }
    }
  }

  beforeAll(async () => {
    issuer = await TestIssuer.start();
    ({ privateKey: stranger } = await generateKeyPair('RS256'));
    publicPem = await exportSPKI((await importJWK(issuer.publicJwk, 'RS256')) as CryptoKey);
    svc = await startService({ API_KEYS_FILE: writeKeysFile([ops]), ...issuer.env() });
    sku = uniqueSku('fuzz-tokens');
    expect((await call(svc.url, 'POST', '/skus', { sku, stock: 100, segments: 4 }, bearer(ops.key))).status).toBe(201);
    const placed = await call(
      svc.url,
      'POST',
      '/orders',
      { sku, quantity: 2, customerId: CUSTOMER, holdSeconds: 3600 },
      bearer(ops.key),
    );
    order = placed.body.orderId;
    // The real token works: what the fuzz refuses is the token, not the route.
    const real = await call(svc.url, 'GET', `/orders/${order}`, undefined, bearer(await signed({})));
    expect(real.status).toBe(200);
  });
  afterAll(async () => {
    await svc?.stop();
    await issuer?.stop();
  });

  it('answers each of 1,200 tokens 401 invalid_token on every route they try, and changes nothing', async () => {
    const before = {
      books: await auditSku(svc.service.db, sku),
      order: (await call(svc.url, 'GET', `/orders/${order}`, undefined, bearer(ops.key))).body,
    };
    const tries = [
      { method: 'POST', path: '/orders', body: { sku, quantity: 1, holdSeconds: 600 } },
      { method: 'POST', path: `/orders/${order}/cancel` },
      { method: 'POST', path: `/orders/${order}/confirm` },
      { method: 'POST', path: `/skus/${sku}/restock`, body: { quantity: 5 } },
      { method: 'GET', path: `/orders/${order}` },
      { method: 'GET', path: `/orders?customerId=${CUSTOMER}` },
    ];
    const sample = fc.sample(specs, { numRuns: 1200, seed });
    const kinds = new Map<string, number>();
    const wrong: string[] = [];
    for (let start = 0; start < sample.length; start += 8) {
      await Promise.all(
        sample.slice(start, start + 8).map(async (spec, offset) => {
          const token = await mint(spec);
          const attempt = tries[(start + offset) % tries.length]!;
          const answer = await call(svc.url, attempt.method, attempt.path, attempt.body, bearer(token));
          kinds.set(spec.kind, (kinds.get(spec.kind) ?? 0) + 1);
          const challenge = answer.headers.get('www-authenticate');
          if (
            answer.status !== 401 ||
            answer.body?.code !== 'invalid_token' ||
            challenge !== 'Bearer error="invalid_token"'
          ) {
            wrong.push(`${JSON.stringify(spec).slice(0, 200)} on ${attempt.method} ${attempt.path}: ${answer.status}`);
          }
          if (token.length > 20 && JSON.stringify(answer.body).includes(token.slice(-20))) {
            wrong.push(`${spec.kind}: the answer echoes the token`);
          }
        }),
      );
    }
    expect(wrong).toEqual([]);
    expect(sample.length).toBe(1200);
    // Every kind was tried, many times.
    expect(kinds.size).toBe(14);
    for (const [kind, count] of kinds) expect(count, kind).toBeGreaterThan(30);
    expect(await auditSku(svc.service.db, sku)).toEqual(before.books);
    expect((await call(svc.url, 'GET', `/orders/${order}`, undefined, bearer(ops.key))).body).toEqual(before.order);
    expect(booksViolations(before.books)).toEqual([]);
  });
});

describe('bad customer tokens against a shared HS256 secret', () => {
  const SECRET = createHash('sha256').update(`fuzz-secret-${seed}`).digest('hex');
  let svc: RunningService;
  let sku: string;

  beforeAll(async () => {
    svc = await startService({
      CUSTOMER_JWT_SECRET: SECRET,
      CUSTOMER_JWT_ISSUER: ISSUER,
      CUSTOMER_JWT_AUDIENCE: AUDIENCE,
      ADMIN_TOKEN: `${SECRET}-admin`,
    });
    sku = uniqueSku('fuzz-hs');
    const created = await call(svc.url, 'POST', '/skus', { sku, stock: 10, segments: 1 }, bearer(`${SECRET}-admin`));
    expect(created.status).toBe(201);
  });
  afterAll(() => svc?.stop());

  it('refuses 300 tokens signed with another secret, by an RSA key, or not at all, and takes the right one', async () => {
    const { privateKey } = await generateKeyPair('RS256');
    const claims = () => ({ sub: CUSTOMER, iss: ISSUER, aud: AUDIENCE, exp: now() + 3600 });
    const sample = fc.sample(
      fc.oneof(
        fc.record({ kind: fc.constant('other-secret'), secret: fc.string({ minLength: 1, maxLength: 64 }) }),
        fc.record({ kind: fc.constant('rs256'), secret: fc.constant('') }),
        fc.record({ kind: fc.constant('none'), secret: fc.constant('') }),
        fc.record({ kind: fc.constant('hs512-same-secret'), secret: fc.constant('') }),
      ),
      { numRuns: 300, seed },
    );
    const wrong: string[] = [];
    for (const spec of sample) {
      const token =
        spec.kind === 'none'
          ? new UnsecuredJWT(claims()).encode()
          : spec.kind === 'rs256'
            ? await new SignJWT(claims()).setProtectedHeader({ alg: 'RS256' }).sign(privateKey)
            : await new SignJWT(claims())
                .setProtectedHeader({ alg: spec.kind === 'hs512-same-secret' ? 'HS512' : 'HS256' })
                .sign(new TextEncoder().encode(spec.kind === 'hs512-same-secret' ? SECRET : `${SECRET}${spec.secret}`));
      const answer = await call(svc.url, 'POST', '/orders', { sku, quantity: 1 }, bearer(token));
      if (answer.status !== 401) wrong.push(`${spec.kind}: ${answer.status}`);
    }
    expect(wrong).toEqual([]);
    expect((await auditSku(svc.service.db, sku)).sold).toBe(0);
    const good = await new SignJWT(claims())
      .setProtectedHeader({ alg: 'HS256' })
      .sign(new TextEncoder().encode(SECRET));
    const placed = await call(svc.url, 'POST', '/orders', { sku, quantity: 1 }, bearer(good));
    expect(placed.status).toBe(201);
    expect(placed.body.customerId).toBe(CUSTOMER);
  });
});
