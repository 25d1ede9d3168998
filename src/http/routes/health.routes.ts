import type { RequestHandler } from 'express';
import { AppError } from '../../errors.js';
import { sendProblem } from '../problem.js';

/** Why an instance cannot take traffic, or null when it can. */
export type Unreadiness = 'shutting_down' | 'dependency_unavailable' | null;

/** `GET /healthz`: liveness, 200 while the process runs, draining included. */
export const liveness: RequestHandler = (_req, res) => {
  res.json({ status: 'ok' });
};

/**
 * `GET /readyz`: readiness, 200 only while Redis and Postgres both answer and the instance is not shutting down (else
 * a problem document, so balancers and people see why).
 */
export function readiness(unreadiness: () => Promise<Unreadiness>): RequestHandler {
  return async (_req, res) => {
    const reason = await unreadiness();
    if (reason === null) {
      res.json({ status: 'ready' });
      return;
    }
    const detail = reason === 'shutting_down' ? 'this instance is draining' : 'Redis or Postgres does not answer';
    sendProblem(res, new AppError(reason, detail, {}, 1));
  };
}
