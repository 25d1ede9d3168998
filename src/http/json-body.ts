import express, { type RequestHandler } from 'express';
import { AppError } from '../errors.js';

export const MAX_BODY_BYTES = 16 * 1024;

const requireJsonContentType: RequestHandler = (req, _res, next) => {
  if (req.is('application/json')) return next();
  const hasBody = req.headers['transfer-encoding'] !== undefined || Number(req.headers['content-length'] ?? 0) > 0;
  if (!hasBody) throw new AppError('bad_request', 'a JSON body is required');
  throw new AppError('unsupported_media_type', 'send the body as Content-Type: application/json');
};

/** JSON bodies only, at most 16 KiB, objects or arrays at the top level (the schemas then demand an object). */
export const jsonBody: RequestHandler[] = [
  requireJsonContentType,
  express.json({ limit: MAX_BODY_BYTES, strict: true, type: () => true }),
];
