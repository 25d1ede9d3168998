import type { RequestHandler } from 'express';
import { rateLimit } from 'express-rate-limit';
import helmet from 'helmet';
import { AppError } from '../errors.js';
import { sendProblem } from './problem.js';

/**
 * Security headers for a JSON API: it serves nothing to render, frame or sniff, so the content security policy
 * allows nothing at all, and browsers are told not to frame it, send referrers or guess content types.
 */
export function securityHeaders(): RequestHandler {
  return helmet({
    contentSecurityPolicy: {
      useDefaults: false,
      directives: { defaultSrc: ["'none'"], frameAncestors: ["'none'"], baseUri: ["'none'"], formAction: ["'none'"] },
    },
    xFrameOptions: { action: 'deny' },
    referrerPolicy: { policy: 'no-referrer' },
  });
}

const WINDOW_MS = 60_000;

/**
 * A per-client limit on order placement (by client address, IPv6 by /56), or undefined when `ordersPerMinute` is 0:
 * off by default, because load tests place thousands of orders from one address. Counts are per instance: behind a
 * load balancer spreading one client over N instances, the client gets up to N times the limit.
 */
export function orderRateLimit(ordersPerMinute: number): RequestHandler | undefined {
  if (ordersPerMinute === 0) return undefined;
  return rateLimit({
    windowMs: WINDOW_MS,
    limit: ordersPerMinute,
    standardHeaders: 'draft-8',
    legacyHeaders: false,
    handler: (req, res) => {
      const resetTime = (req as { rateLimit?: { resetTime?: Date } }).rateLimit?.resetTime;
      const seconds = resetTime ? Math.max(1, Math.ceil((resetTime.getTime() - Date.now()) / 1000)) : WINDOW_MS / 1000;
      const detail = `at most ${ordersPerMinute} orders per minute from one client; retry in ${seconds} s`;
      sendProblem(res, new AppError('rate_limited', detail, {}, seconds));
    },
  });
}
