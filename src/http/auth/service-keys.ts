import { createHash, timingSafeEqual } from 'node:crypto';
import { type ApiKey, SCOPES, type Scope } from '../../api-keys-file.js';
import type { Principal } from './principal.js';

/** What METRICS_TOKEN may do: read-only monitoring, the metrics and the event feed. */
export const METRICS_TOKEN_SCOPES: readonly Scope[] = ['metrics:read', 'events:read'];

const digest = (value: string) => createHash('sha256').update(value).digest();

/**
 * The service credentials: the keys of API_KEYS_FILE, and ADMIN_TOKEN (every scope) and METRICS_TOKEN
 * (`metrics:read`, `events:read`) as two more keys. Only SHA-256 digests are kept; a presented key is hashed and compared with every
 * digest in constant time, so neither the answer nor its timing tells how close a guess came.
 */
export class ServiceKeys {
  private readonly keys: { sha256: Buffer; principal: Principal }[];

  constructor(apiKeys: readonly ApiKey[], adminToken: string | undefined, metricsToken: string | undefined) {
    const service = (name: string, scopes: readonly Scope[]): Principal =>
      Object.freeze({ kind: 'service', name, scopes: new Set(scopes) });
    this.keys = apiKeys.map((key) => ({ sha256: key.sha256, principal: service(key.name, key.scopes) }));
    if (adminToken !== undefined)
      this.keys.push({ sha256: digest(adminToken), principal: service('ADMIN_TOKEN', SCOPES) });
    if (metricsToken !== undefined) {
      this.keys.push({ sha256: digest(metricsToken), principal: service('METRICS_TOKEN', METRICS_TOKEN_SCOPES) });
    }
  }

  get size(): number {
    return this.keys.length;
  }

  /** The principal of the key, or undefined when it is none of them. Every digest is compared, whatever matched. */
  match(presented: string): Principal | undefined {
    const sha256 = digest(presented);
    let found: Principal | undefined;
    for (const key of this.keys) if (timingSafeEqual(sha256, key.sha256) && found === undefined) found = key.principal;
    return found;
  }
}
