import { setTimeout as sleep } from 'node:timers/promises';
import type { WhileHeld } from '../../src/orders/batch-steps.js';

/**
 * The load test's business step: CRITICAL_SECTION_DELAY_MS of the load test's entry point (0 or unset: none), a
 * simulated step held inside the segments' lock, as an order's own work (a payment call, a fraud check) would be.
 * Read by the entry point only: the product knows no such setting, only its `whileHeld` extension point.
 */
export function businessStepMs(env: NodeJS.ProcessEnv = process.env): number {
  const text = env.CRITICAL_SECTION_DELAY_MS ?? '0';
  const ms = Number(text);
  if (!/^\d+$/.test(text) || ms > 10_000) throw new Error(`CRITICAL_SECTION_DELAY_MS: 0–10000 ms, not '${text}'`);
  return ms;
}

/** A step of `ms` inside every batch's hold, cut short when a lease is lost; none for 0. */
export function businessStep(ms: number): WhileHeld | undefined {
  return ms > 0 ? (lockLost) => sleep(ms, undefined, { signal: lockLost }) : undefined;
}
