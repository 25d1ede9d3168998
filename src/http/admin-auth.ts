import { createHash, timingSafeEqual } from 'node:crypto';
import type { RequestHandler } from 'express';
import { AppError } from '../errors.js';

const digest = (value: string) => createHash('sha256').update(value).digest();

/** The bearer tokens the service is configured with. */
export interface Tokens {
  adminToken: string | undefined;
  metricsToken: string | undefined;
}

/**
 * Admin routes need `Authorization: Bearer <ADMIN_TOKEN>` when a token is configured. Without one the service
 * listens on loopback only (see main.ts), and admin routes are open to local callers.
 */
export const requireAdmin = (tokens: Tokens): RequestHandler => requireBearer([tokens.adminToken], 'admin token');

/**
 * Read-only monitoring (`GET /metrics`, the dashboard's data) takes `METRICS_TOKEN`, so a Prometheus server can scrape
 * without holding a token that changes stock; the admin token is accepted too, as it may do everything. With neither
 * configured it is open, like the admin routes.
 */
export const requireMonitoring = (tokens: Tokens): RequestHandler =>
  requireBearer([tokens.metricsToken, tokens.adminToken], 'metrics or admin token');

/** The one bearer check: 401 without an `Authorization: Bearer` header, 403 with a token that is none of `accepted`. */
function requireBearer(accepted: (string | undefined)[], what: string): RequestHandler {
  const expected = accepted.filter((token) => token !== undefined).map(digest);
  if (expected.length === 0) return (_req, _res, next) => next();
  return (req, _res, next) => {
    const header = req.get('authorization');
    const match = header ? /^Bearer +(\S+)\s*$/i.exec(header) : null;
    if (!match) throw new AppError('unauthorized', `send Authorization: Bearer <${what}>`);
    // Comparing digests keeps the comparison constant-time whatever the presented length; every token is compared.
    const presented = digest(match[1]!);
    const valid = expected.reduce((ok, token) => timingSafeEqual(presented, token) || ok, false);
    if (!valid) throw new AppError('forbidden', `the ${what} is not valid`);
    next();
  };
}
