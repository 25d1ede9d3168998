import { setTimeout as sleep } from 'node:timers/promises';

/**
 * Polls `condition` every `intervalMs` until it holds; resolves to the milliseconds that took, or Infinity once
 * `timeoutMs` passed (the caller asserts the bound, so a slow machine reads as a failed check, not a hung test).
 */
export async function waitFor(
  condition: () => boolean | Promise<boolean>,
  timeoutMs: number,
  intervalMs = 50,
): Promise<number> {
  const started = Date.now();
  for (;;) {
    if (await condition()) return Date.now() - started;
    if (Date.now() - started > timeoutMs) return Infinity;
    await sleep(intervalMs);
  }
}
