import { writeFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.js';
import { keysFilePath, serviceKey, writeKeysFile } from '../security/credentials.js';

const keysFile = (content: string) => {
  const file = keysFilePath();
  writeFileSync(file, content);
  return file;
};
const sha = 'a'.repeat(64);

describe('credentials in the configuration', () => {
  it('reads API_KEYS_FILE: names, digests and scopes', () => {
    const config = loadConfig({ API_KEYS_FILE: writeKeysFile([serviceKey('storefront', ['orders:place'])]) });
    expect(config.apiKeys).toHaveLength(1);
    expect(config.apiKeys![0]).toMatchObject({ name: 'storefront', scopes: ['orders:place'] });
    expect(config.apiKeys![0]!.sha256).toHaveLength(32);
  });

  it.each([
    ['a missing file', '/nonexistent/api-keys.json', /API_KEYS_FILE: ENOENT/],
    ['not JSON', keysFile('{'), /API_KEYS_FILE: .*JSON/],
    ['an empty list', keysFile('[]'), /API_KEYS_FILE/],
    [
      'a key in the clear',
      keysFile(JSON.stringify([{ name: 'a', key: 'x', scopes: ['orders:read'] }])),
      /API_KEYS_FILE/,
    ],
    ['a short digest', keysFile(JSON.stringify([{ name: 'a', sha256: 'abc', scopes: ['orders:read'] }])), /sha256/],
    ['an unknown scope', keysFile(JSON.stringify([{ name: 'a', sha256: sha, scopes: ['orders:all'] }])), /scopes/],
    ['no scope', keysFile(JSON.stringify([{ name: 'a', sha256: sha, scopes: [] }])), /scopes/],
    [
      'a name twice',
      keysFile(
        JSON.stringify([
          { name: 'a', sha256: sha, scopes: ['orders:read'] },
          { name: 'a', sha256: 'b'.repeat(64), scopes: ['orders:read'] },
        ]),
      ),
      /distinct/,
    ],
    [
      'a key twice',
      keysFile(
        JSON.stringify([
          { name: 'a', sha256: sha, scopes: ['orders:read'] },
          { name: 'b', sha256: sha.toUpperCase(), scopes: ['orders:read'] },
        ]),
      ),
      /once/,
    ],
  ])('refuses to start with %s', (_what, file, message) => {
    expect(() => loadConfig({ API_KEYS_FILE: file })).toThrow(message);
  });

  it('takes a customer issuer only whole, with one kind of key, and a secret long enough', () => {
    const issuer = { CUSTOMER_JWT_ISSUER: 'https://shop.example/', CUSTOMER_JWT_AUDIENCE: 'stock' };
    const secret = 's'.repeat(32);
    expect(loadConfig({ CUSTOMER_JWT_SECRET: secret, ...issuer }).customerTokens).toMatchObject({
      secret,
      ...{ issuer: issuer.CUSTOMER_JWT_ISSUER },
    });
    expect(() => loadConfig({ CUSTOMER_JWT_SECRET: secret })).toThrow(/CUSTOMER_JWT_ISSUER/);
    expect(() => loadConfig({ CUSTOMER_JWT_SECRET: secret, CUSTOMER_JWT_ISSUER: 'x' })).toThrow(
      /CUSTOMER_JWT_AUDIENCE/,
    );
    expect(() => loadConfig({ ...issuer })).toThrow(/CUSTOMER_JWKS_URL or CUSTOMER_JWT_SECRET/);
    expect(() => loadConfig({ CUSTOMER_JWT_SECRET: 'short', ...issuer })).toThrow(/at least 32/);
    expect(() =>
      loadConfig({ CUSTOMER_JWT_SECRET: secret, CUSTOMER_JWKS_URL: 'https://idp.example/jwks.json', ...issuer }),
    ).toThrow(/not both/);
    expect(() => loadConfig({ CUSTOMER_JWKS_URL: 'ftp://idp.example/jwks.json', ...issuer })).toThrow(
      /CUSTOMER_JWKS_URL/,
    );
    expect(loadConfig({}).customerCancelConfirmed).toBe(false);
  });
});
