import { AppError } from '../errors.js';

/** The refusals of the line's routes, each decided in one place (codes in src/errors.ts). */

export function lineNotFound(sku: string): AppError {
  return new AppError('line_not_found', `SKU '${sku}' is not sold through a line`, { sku });
}

export function ticketNotFound(ticketId: string): AppError {
  return new AppError('ticket_not_found', `ticket '${ticketId}' does not exist`);
}

/**
 * The line holds as many tickets that can still be admitted as it may: nobody joins until some of them end (bought,
 * cancelled, expired or refused).
 */
export function lineFull(sku: string, capacity: number): AppError {
  return new AppError(
    'line_full',
    `the line for SKU '${sku}' is full (${capacity} tickets waiting or admitted); retry when some have ended`,
    { sku, capacity },
  );
}

/** Sold out, or its sale window over: the line takes no more joins. */
export function lineClosed(sku: string): AppError {
  return new AppError('line_closed', `the line for SKU '${sku}' is closed: sold out or past its sale window`, { sku });
}
