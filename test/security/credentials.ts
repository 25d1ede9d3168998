import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { exportJWK, generateKeyPair, type JWK, type JWTPayload, SignJWT } from 'jose';
import type { Scope } from '../../src/api-keys-file.js';

/** A service key: what the caller sends, and its entry in API_KEYS_FILE. */
export interface ServiceKey {
  name: string;
  key: string;
  scopes: Scope[];
}

export const serviceKey = (name: string, scopes: Scope[]): ServiceKey => ({
  name,
  key: `${name}-${randomBytes(16).toString('hex')}`,
  scopes,
});

export const bearer = (credential: string) => ({ authorization: `Bearer ${credential}` });

let keysDir: string | undefined;
let keysFiles = 0;
/** A fresh path for a keys file, in one directory per process that goes when the process exits. */
export function keysFilePath(): string {
  if (!keysDir) {
    const dir = (keysDir = mkdtempSync(path.join(tmpdir(), 'stock-keys-')));
    process.once('exit', () => rmSync(dir, { recursive: true, force: true }));
  }
  return path.join(keysDir, `api-keys-${++keysFiles}.json`);
}

/** Writes an API_KEYS_FILE (hashes only) for these keys, and answers its path. */
export function writeKeysFile(keys: ServiceKey[]): string {
  const file = keysFilePath();
  const entries = keys.map(({ name, key, scopes }) => ({
    name,
    sha256: createHash('sha256').update(key).digest('hex'),
    scopes,
  }));
  writeFileSync(file, JSON.stringify(entries));
  return file;
}

export const ISSUER = 'https://auth.shop.test/';
export const AUDIENCE = 'segmented-stock';

/** The customer issuer of a test: an RS256 key pair whose public half a loopback JWKS server serves. */
export class TestIssuer {
  private constructor(
    readonly privateKey: CryptoKey,
    readonly publicJwk: JWK,
    readonly kid: string,
    private readonly server: Server,
    readonly jwksUrl: string,
  ) {}

  static async start(): Promise<TestIssuer> {
    const { privateKey, publicKey } = await generateKeyPair('RS256');
    const kid = `k-${randomBytes(4).toString('hex')}`;
    const publicJwk = { ...(await exportJWK(publicKey)), kid, alg: 'RS256', use: 'sig' };
    const body = JSON.stringify({ keys: [publicJwk] });
    const server = createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' }).end(body);
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const { port } = server.address() as AddressInfo;
    return new TestIssuer(privateKey, publicJwk, kid, server, `http://127.0.0.1:${port}/.well-known/jwks.json`);
  }

  /** The service's environment for this issuer. */
  env(): Record<string, string> {
    return { CUSTOMER_JWKS_URL: this.jwksUrl, CUSTOMER_JWT_ISSUER: ISSUER, CUSTOMER_JWT_AUDIENCE: AUDIENCE };
  }

  /** A valid token for `customerId`, an hour long unless `claims` say otherwise. */
  token(customerId: string, claims: JWTPayload = {}): Promise<string> {
    return new SignJWT({ ...claims })
      .setProtectedHeader({ alg: 'RS256', kid: this.kid })
      .setSubject(customerId)
      .setIssuer(ISSUER)
      .setAudience(AUDIENCE)
      .setIssuedAt()
      .setExpirationTime(claims.exp ?? '1h')
      .sign(this.privateKey);
  }

  async stop(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}
