import { setMaxListeners } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Contender } from './contenders.js';

export interface CellSpec {
  workers: number;
  keys: number;
  holdMs: number;
  warmupMs: number;
  durationMs: number;
}

export interface CellResult {
  contender: string;
  workers: number;
  keys: number;
  holdMs: number;
  /** Critical sections completed in the measured window, per second. */
  sectionsPerSecond: number;
  /** Longest wait for an acquisition started in the window, counting waits still open when it closed. */
  maxWaitMs: number;
  p99WaitMs: number;
  /** Mean time a worker actually spent in its hold (a timer of H ms fires a little late): the real ceiling is K × 1000 / this. */
  meanHoldMs: number;
  /** Acquisitions that failed for another reason than the end of the run. */
  errors: number;
}

/**
 * `workers` loops of acquire → hold → release. Worker w takes key (w + i) mod K on its i-th round: every worker visits
 * every key, so after a release it waits on another key and a key stays busy only if the lock wakes its waiters
 * promptly (a random key per round caps any lock at ~82 % of K × 1000 / H; a fixed key per worker lets the
 * releaser simply take its own key again and hides wake-up latency).
 */
export async function runCell(contender: Contender, spec: CellSpec): Promise<CellResult> {
  const stop = new AbortController();
  // Every waiting worker listens to it.
  setMaxListeners(spec.workers * 2, stop.signal);
  const started = performance.now();
  const windowStart = started + spec.warmupMs;
  const windowEnd = windowStart + spec.durationMs;
  const waits: number[] = [];
  const openWaits = new Set<number>();
  let sections = 0;
  let errors = 0;
  let holdTotal = 0;
  let holds = 0;
  const keys = Array.from({ length: spec.keys }, (_, k) => `k${k}`);

  const worker = async (w: number) => {
    for (let round = 0; performance.now() < windowEnd; round++) {
      const key = keys[(w + round) % keys.length]!;
      const askedAt = performance.now();
      openWaits.add(askedAt);
      let release: () => Promise<unknown>;
      try {
        release = await contender.acquire(key, stop.signal);
      } catch {
        openWaits.delete(askedAt);
        if (!stop.signal.aborted) errors++;
        if (stop.signal.aborted) return;
        continue;
      }
      openWaits.delete(askedAt);
      const gotAt = performance.now();
      if (askedAt >= windowStart && askedAt < windowEnd) waits.push(gotAt - askedAt);
      if (spec.holdMs > 0) await sleep(spec.holdMs);
      holdTotal += performance.now() - gotAt;
      holds++;
      await release().catch(() => errors++);
      const doneAt = performance.now();
      if (doneAt >= windowStart && doneAt < windowEnd) sections++;
    }
  };

  const running = Promise.all(Array.from({ length: spec.workers }, (_, w) => worker(w)));
  await sleep(windowEnd - performance.now());
  // Waits still open at the end count as long as they have lasted: starvation must not hide.
  const endedAt = performance.now();
  for (const askedAt of openWaits) if (askedAt >= windowStart) waits.push(endedAt - askedAt);
  stop.abort(new Error('run over'));
  await Promise.race([running, sleep(30_000)]);

  waits.sort((a, b) => a - b);
  return {
    contender: contender.name,
    workers: spec.workers,
    keys: spec.keys,
    holdMs: spec.holdMs,
    sectionsPerSecond: sections / (spec.durationMs / 1000),
    maxWaitMs: waits.at(-1) ?? 0,
    p99WaitMs: waits[Math.min(waits.length - 1, Math.floor(waits.length * 0.99))] ?? 0,
    meanHoldMs: holds ? holdTotal / holds : 0,
    errors,
  };
}
