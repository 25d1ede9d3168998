import { createHash, timingSafeEqual } from 'node:crypto';
import type { RequestHandler } from 'express';
import { AppError } from '../errors.js';

const digest = (value: string) => createHash('sha256').update(value).digest();

/**
 * Admin routes need `Authorization: Bearer <ADMIN_TOKEN>` when a token is configured. Without one the service
 * listens on loopback only (see main.ts), and admin routes are open to local callers.
 */
export function requireAdmin(adminToken: string | undefined): RequestHandler {
  if (adminToken === undefined) return (_req, _res, next) => next();
  const expected = digest(adminToken);
  return (req, _res, next) => {
    const header = req.get('authorization');
    const match = header ? /^Bearer +(\S+)\s*$/i.exec(header) : null;
    if (!match) throw new AppError('unauthorized', 'send Authorization: Bearer <admin token>');
    // Comparing digests keeps the comparison constant-time whatever the presented length.
    if (!timingSafeEqual(digest(match[1]!), expected)) throw new AppError('forbidden', 'the admin token is not valid');
    next();
  };
}
