import { SignJWT } from 'jose';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { CustomerTokenVerifier } from '../../src/http/auth/customer-tokens.js';

const SECRET = 'a-development-secret-of-32-chars!';
const config = { jwksUrl: undefined, secret: SECRET, issuer: 'https://shop.example/', audience: 'stock' };
const sign = (exp: number) =>
  new SignJWT({})
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
