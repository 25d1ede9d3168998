import express, { type RequestHandler } from 'express';
import { AppError } from '../errors.js';

export const MAX_BODY_BYTES = 16 * 1024;

const parseJson = express.json({ limit: MAX_BODY_BYTES, strict: true, type: () => true });

/**
 * JSON bodies only, at most 16 KiB, objects or arrays at the top level (the schemas then demand an object). One
 * middleware: the content type checked, then body-parser's reader; the plain `application/json` every client sends is
 * recognised without parsing the media type.
 */
export const jsonBody: RequestHandler = (req, res, next) => {
  // As `req.is` decides, short of the media type's parse: a body (node has checked any Content-Length), that type.
  const { 'content-type': type, 'content-length': length, 'transfer-encoding': chunked } = req.headers;
  const plainJson = type === 'application/json' && (length !== undefined || chunked !== undefined);
  if (plainJson || req.is('application/json')) return parseJson(req, res, next);
  const hasBody = chunked !== undefined || Number(length ?? 0) > 0;
  if (!hasBody) throw new AppError('bad_request', 'a JSON body is required');
  throw new AppError('unsupported_media_type', 'send the body as Content-Type: application/json');
};
