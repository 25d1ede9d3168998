import { setTimeout as sleep } from 'node:timers/promises';

/** Polls `condition` every 100 ms until it holds (true) or `timeoutMs` has passed (false). */
export async function untilTrue(condition: () => Promise<boolean>, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await condition()) return true;
    if (Date.now() > deadline) return false;
    await sleep(100);
  }
}
