import { createHash } from 'node:crypto';
import type { Request, RequestHandler, Response } from 'express';
import { rateLimit } from 'express-rate-limit';
import helmet from 'helmet';
import type { Cluster, Redis } from 'ioredis';
import { RedisStore, type RedisReply, type SendCommandFn } from 'rate-limit-redis';
import { AppError } from '../errors.js';
import type { Logger } from '../logger.js';
import { sendProblem } from './problem.js';

/**
 * Security headers for a JSON API, the set OWASP's REST Security Cheat Sheet gives for API responses: it serves
 * nothing to render, frame or sniff, so the content security policy allows nothing at all, and browsers are told not
 * to frame it, send referrers, guess content types or load it from another origin. helmet's other defaults concern
 * HTML documents (Cross-Origin-Opener-Policy, Origin-Agent-Cluster, X-DNS-Prefetch-Control) or browsers and plugins
 * long gone (X-Download-Options, X-Permitted-Cross-Domain-Policies, X-XSS-Protection): they are left off, because
 * every answer would carry their 250 bytes and six more headers to build, and none of them protects a JSON answer.
 *
 * helmet decides the headers. They are the same for every response, so helmet runs once, here, against a recorder,
 * and each response gets them in one call rather than through helmet's dozen middlewares (a tenth of what an
 * answer cost the service).
 */
export function securityHeaders(): RequestHandler {
  const headers = new Map<string, string>();
  const recorder = {
    setHeader: (name: string, value: unknown) => headers.set(name, String(value)),
    removeHeader: (name: string) => headers.delete(name),
  };
  helmet({
    contentSecurityPolicy: {
      useDefaults: false,
      directives: { defaultSrc: ["'none'"], frameAncestors: ["'none'"], baseUri: ["'none'"], formAction: ["'none'"] },
    },
    xFrameOptions: { action: 'deny' },
    referrerPolicy: { policy: 'no-referrer' },
    crossOriginOpenerPolicy: false,
    originAgentCluster: false,
    xDnsPrefetchControl: false,
    xDownloadOptions: false,
    xPermittedCrossDomainPolicies: false,
    xXssProtection: false,
  })({} as Request, recorder as unknown as Response, () => {});
  return setAll(headers);
}

/**
 * For the two HTML pages (the API document's and the dashboard's) and their files: the page's own content security
 * policy in place of the API's, plus the headers that protect a document, which JSON answers leave off: its own
 * browsing context group (Cross-Origin-Opener-Policy) and an origin-keyed agent cluster.
 */
export function pageHeaders(contentSecurityPolicy: string): RequestHandler {
  return setAll(
    new Map([
      ['Content-Security-Policy', contentSecurityPolicy],
      ['Cross-Origin-Opener-Policy', 'same-origin'],
      ['Origin-Agent-Cluster', '?1'],
    ]),
  );
}

/** Sets the same headers on every response, in one call. */
function setAll(headers: Map<string, string>): RequestHandler {
  return (_req, res, next) => {
    res.setHeaders(headers);
    next();
  };
}

const WINDOW_MS = 60_000;
/**
 * Prefix of the order rate limit's counters in the service's Redis, one per customer or address (single-key scripts: no
 * hash tag needed). The limit's own key, beside its only user: the lock library's keys (src/lock/keys.ts) are the
 * lock's.
 */
const RATE_LIMIT_PREFIX = 'ratelimit:orders:';

/**
 * A per-client limit on order placement (counted by `keyOf`: the customer, or the client's address; see
 * Access.rateLimitKey), or undefined when `ordersPerMinute` is 0: off by default, because load tests place thousands
 * of orders from one address. It runs after the body is parsed, so a service key's orders count per customer. The counts live in the service's
 * Redis, so the limit holds across all instances. While Redis does not answer the limit fails open (the order goes
 * on unlimited, and a warning is logged): an outage of the limiter must never become refused orders.
 */
export function orderRateLimit(
  ordersPerMinute: number,
  redis: Redis | Cluster,
  log: Logger,
  keyOf: (req: Request, res: Response) => string,
): RequestHandler | undefined {
  if (ordersPerMinute === 0) return undefined;
  return rateLimit({
    windowMs: WINDOW_MS,
    limit: ordersPerMinute,
    standardHeaders: 'draft-8',
    legacyHeaders: false,
    keyGenerator: keyOf,
    store: new RedisStore({ sendCommand: redisCommands(redis), prefix: RATE_LIMIT_PREFIX }),
    passOnStoreError: true,
    // Without the stack: during a Redis outage this is one line per order, beside the order's own.
    logger: {
      error: (error: unknown) =>
        log.warn({ err: (error as Error)?.message }, 'rate limit store unavailable: order not limited'),
      warn: (message: unknown) => log.warn({ detail: String(message) }, 'rate limit'),
    },
    handler: (req, res) => {
      const resetTime = (req as { rateLimit?: { resetTime?: Date } }).rateLimit?.resetTime;
      const seconds = resetTime ? Math.max(1, Math.ceil((resetTime.getTime() - Date.now()) / 1000)) : WINDOW_MS / 1000;
      const detail = `at most ${ordersPerMinute} orders per minute from one customer or client; retry in ${seconds} s`;
      sendProblem(res, new AppError('rate_limited', detail, {}, seconds));
    },
  });
}

/**
 * The store's raw commands over an ioredis connection (a single node or a Cluster alike: only `call`, `evalsha` and
 * `eval`, which both route by key). The store loads its scripts with SCRIPT LOAD when the limiter is created, before
 * the connection is up, and would keep that failure for ever; on a Cluster, SCRIPT LOAD would reach one node only. So
 * SCRIPT LOAD is answered here with the script's SHA1, and EVALSHA falls back to EVAL on NOSCRIPT, as ioredis'
 * own scripts do.
 */
function redisCommands(redis: Redis | Cluster): SendCommandFn {
  const scripts = new Map<string, string>();
  return async (command, ...args) => {
    if (command.toUpperCase() === 'SCRIPT' && args[0]?.toUpperCase() === 'LOAD' && args[1] !== undefined) {
      const sha = createHash('sha1').update(args[1]).digest('hex');
      scripts.set(sha, args[1]);
      return sha;
    }
    if (command.toUpperCase() === 'EVALSHA') {
      const [sha, keyCount, ...rest] = args as [string, string, ...string[]];
      try {
        return (await redis.evalsha(sha, keyCount, ...rest)) as RedisReply;
      } catch (error) {
        const source = scripts.get(sha);
        if (!(error instanceof Error) || !error.message.startsWith('NOSCRIPT') || source === undefined) throw error;
        return (await redis.eval(source, keyCount, ...rest)) as RedisReply;
      }
    }
    return (await redis.call(command, ...args)) as RedisReply;
  };
}
