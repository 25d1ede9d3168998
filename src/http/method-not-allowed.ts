import type { RequestHandler } from 'express';
import { AppError } from '../errors.js';

export function methodNotAllowed(...allowed: string[]): RequestHandler {
  const allow = allowed.join(', ');
  return (req, res) => {
    res.set('Allow', allow);
    throw new AppError('method_not_allowed', `${req.method} is not supported here; use ${allow}`);
  };
}
