/**
 * A fenced write touched fewer rows than it meant to: a lock it relied on was lost (expired, taken over). Thrown
 * inside a transaction to roll the rest back; the caller starts over with fresh locks. Never reaches a client.
 */
export class FencedOutError extends Error {
  constructor() {
    super('fenced write refused: a segment lock it relied on was lost');
  }
}
