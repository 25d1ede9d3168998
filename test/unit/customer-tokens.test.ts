import { SignJWT } from 'jose';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { CustomerTokenVerifier } from '../../src/http/auth/customer-tokens.js';

const SECRET = 'a-development-secret-of-32-chars!';
const DAY = 86_400;
const config = {
  jwksUrl: undefined,
  secret: SECRET,
  issuer: 'https://shop.example/',
  audience: 'stock',
  maxLifetimeSeconds: DAY,
};
const sign = (exp: number, claims: { iat?: number } = {}) =>
  new SignJWT(claims)
    .setProtectedHeader({ alg: 'HS256' })
    .setSubject('alice')
    .setIssuer(config.issuer)
    .setAudience(config.audience)
    .setExpirationTime(exp)
    .sign(new TextEncoder().encode(SECRET));

describe('remembering verified customer tokens', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('takes a verified token again without verifying, but never past its exp', async () => {
    vi.useFakeTimers({ toFake: ['Date'] });
    const start = Date.parse('2026-11-23T12:00:00Z');
    vi.setSystemTime(start);
    const verifier = new CustomerTokenVerifier(config);
    const token = await sign(start / 1000 + 45);
    expect(await verifier.customerOf(token)).toBe('alice');
    vi.setSystemTime(start + 40_000);
    expect(await verifier.customerOf(token)).toBe('alice');
    // Past exp, and past the clock tolerance: verified again, and refused.
    vi.setSystemTime(start + 45_000 + 31_000);
    await expect(verifier.customerOf(token)).rejects.toMatchObject({ code: 'invalid_token' });
  });

  it('remembers only tokens that verified', async () => {
    const verifier = new CustomerTokenVerifier(config);
    const token = await sign(Math.floor(Date.now() / 1000) + 600);
    // One signature character changed, well inside the signature (the last one carries unused bits).
    const at = token.length - 10;
    const forged = `${token.slice(0, at)}${token[at] === 'A' ? 'B' : 'A'}${token.slice(at + 1)}`;
    for (let i = 0; i < 3; i++)
      await expect(verifier.customerOf(forged)).rejects.toMatchObject({ code: 'invalid_token' });
    expect(await verifier.customerOf(token)).toBe('alice');
  });
});

describe('the longest a customer token may be valid', () => {
  const nowS = () => Math.floor(Date.now() / 1000);

  it('takes a token whose exp lies at most the maximum after its iat, or after now without iat', async () => {
    const verifier = new CustomerTokenVerifier(config);
    expect(await verifier.customerOf(await sign(nowS() + DAY, { iat: nowS() }))).toBe('alice');
    expect(await verifier.customerOf(await sign(nowS() + DAY))).toBe('alice');
    // Issued an hour ago for a day: within the maximum.
    expect(await verifier.customerOf(await sign(nowS() + DAY - 3600, { iat: nowS() - 3600 }))).toBe('alice');
  });

  it('refuses a token valid for longer: a 100-year exp, with or without iat, and an iat in the future', async () => {
    const verifier = new CustomerTokenVerifier(config);
    const century = nowS() + 100 * 365 * DAY;
    for (const token of [
      await sign(century, { iat: nowS() }),
      await sign(century),
      await sign(nowS() + DAY + 120, { iat: nowS() }),
      // An iat put ahead so that exp − iat fits: refused for the iat.
      await sign(century, { iat: century - DAY }),
    ]) {
      await expect(verifier.customerOf(token)).rejects.toMatchObject({ code: 'invalid_token' });
    }
  });

  it('follows the setting', async () => {
    const verifier = new CustomerTokenVerifier({ ...config, maxLifetimeSeconds: 600 });
    expect(await verifier.customerOf(await sign(nowS() + 600, { iat: nowS() }))).toBe('alice');
    await expect(verifier.customerOf(await sign(nowS() + 3600, { iat: nowS() }))).rejects.toMatchObject({
      code: 'invalid_token',
    });
  });
});
