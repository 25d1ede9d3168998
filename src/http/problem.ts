import type { ErrorRequestHandler, Response } from 'express';
import { AppError, type ErrorCode, errorCatalog, isDependencyFailure } from '../errors.js';
import type { Logger } from '../logger.js';
import { sendJson } from './send-json.js';

/** Sends an RFC 9457 problem document. */
export function sendProblem(res: Response, error: AppError): void {
  if (error.retryAfterSeconds !== undefined) res.setHeader('Retry-After', String(error.retryAfterSeconds));
  const challenge = bearerChallenge(error);
  if (challenge) res.setHeader('WWW-Authenticate', challenge);
  const problem = {
    type: problemType(error.code),
    title: error.title,
    status: error.status,
    detail: error.detail,
    code: error.code,
    ...error.extensions,
  };
  sendJson(res, error.status, problem, 'application/problem+json; charset=utf-8');
}

/** RFC 6750: what a caller without the right bearer credential is told to send. */
function bearerChallenge(error: AppError): string | undefined {
  if (error.code === 'unauthorized') return 'Bearer';
  if (error.code === 'invalid_token') return 'Bearer error="invalid_token"';
  const scope = error.extensions.scope;
  if (error.code === 'forbidden' && typeof scope === 'string')
    return `Bearer error="insufficient_scope", scope="${scope}"`;
  return undefined;
}

export const problemType = (code: ErrorCode) => `urn:segmented-stock:problem:${code}`;

/** body-parser's error types, mapped to our codes. */
const bodyParserErrors: Record<string, ErrorCode> = {
  'entity.too.large': 'body_too_large',
  'entity.parse.failed': 'invalid_json',
  'encoding.unsupported': 'unsupported_media_type',
  'charset.unsupported': 'unsupported_media_type',
  'request.aborted': 'bad_request',
  'request.size.invalid': 'bad_request',
  'entity.verify.failed': 'bad_request',
  'stream.encoding.set': 'internal',
};

/** The one place errors become responses. Unknown errors become a bare 500: no stack, no SQL, no internals. */
export function errorHandler(log: Logger): ErrorRequestHandler {
  return (error, req, res, _next) => {
    if (res.headersSent) {
      res.destroy();
      return;
    }
    if (error instanceof AppError) {
      sendProblem(res, error);
      return;
    }
    const parserCode = typeof error?.type === 'string' ? bodyParserErrors[error.type] : undefined;
    if (parserCode && parserCode !== 'internal') {
      const detail =
        parserCode === 'body_too_large' ? 'request bodies are limited to 16 KiB' : describeParserError(parserCode);
      sendProblem(res, new AppError(parserCode, detail));
      return;
    }
    // Other client errors raised inside express itself, e.g. a path with malformed percent-encoding.
    const status = typeof error?.status === 'number' ? error.status : undefined;
    if (status !== undefined && status >= 400 && status < 500) {
      sendProblem(res, new AppError('bad_request', 'the request could not be parsed'));
      return;
    }
    if (isDependencyFailure(error)) {
      log.warn({ err: error, method: req.method, url: req.originalUrl }, 'dependency unavailable');
      sendProblem(
        res,
        new AppError('dependency_unavailable', 'Redis or Postgres did not answer; retry shortly', {}, 1),
      );
      return;
    }
    log.error({ err: error, method: req.method, url: req.originalUrl }, 'unexpected error');
    sendProblem(res, new AppError('internal', 'the request could not be completed'));
  };
}

function describeParserError(code: ErrorCode): string {
  if (code === 'invalid_json') return 'the body is not valid JSON';
  if (code === 'unsupported_media_type') return 'the body must be UTF-8 JSON';
  return errorCatalog[code].title;
}
