import type { Response } from 'express';

/**
 * Sends a JSON document with node's own `writeHead`/`end`, keeping any header set before (security headers,
 * Retry-After). For the busiest answers — an order placed, a refusal during a flood — rather than express's
 * `res.json`, which on every call looks the content type up, parses it again to add the charset and serialises
 * through its own replacer: about a tenth of what a refused order costs the instance.
 */
export function sendJson(
  res: Response,
  status: number,
  document: unknown,
  contentType = 'application/json; charset=utf-8',
): void {
  const body = JSON.stringify(document);
  res.writeHead(status, { 'Content-Type': contentType, 'Content-Length': Buffer.byteLength(body) }).end(body);
}
