import { redisKeys } from '../lock/keys.js';
import type { RedisClient } from '../redis/connections.js';

/** Round trips per synchronisation; the fastest one is kept, as NTP keeps its best sample. */
const SAMPLES = 5;
/** How often the offset is measured again: a process clock drifts by microseconds in this time, or steps (NTP). */
const RESYNC_MS = 5_000;

/** Reads Redis's clock, on the node that owns one fixed key, so every instance asks the same node, Cluster or not. */
const readTime = `local t = redis.call('TIME') return {t[1], t[2]}`;

/**
 * The time every instance agrees on: the clock of one Redis node, which every instance already shares, tracked here as
 * an offset from this process's own clock. A sale window opens and closes by this clock, so an instance whose own
 * clock runs seconds ahead neither opens early nor closes late.
 *
 * The offset is measured like NTP does: ask Redis its time, assume it read its clock halfway through the round trip,
 * and keep the fastest of a few round trips. The error of `now()` is then at most half that round trip (reported as
 * `uncertaintyMs`; well under a millisecond on a local network) plus what the process clock drifted since the last
 * measurement, a few seconds ago. The process side is a monotonic clock, so a step of the host's clock (NTP, an
 * operator) cannot move `now()` between measurements. Should Redis be unreachable, the last offset stays in use.
 */
export class SharedClock {
  private offsetMs = 0;
  private uncertainty = Number.POSITIVE_INFINITY;
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly redis: RedisClient,
    /**
     * Test-only: how far this process's own clock is off (PROCESS_CLOCK_SKEW_MS), to show that the shared clock does
     * not depend on it. 0 in production.
     */
    private readonly processSkewMs = 0,
  ) {}

  /** Milliseconds since the epoch by the shared clock. */
  now(): number {
    return this.processNow() + this.offsetMs;
  }

  /** Half the round trip of the sample the offset came from: how far `now()` may be off (plus drift since). */
  get uncertaintyMs(): number {
    return this.uncertainty;
  }

  /** The difference to this process's own clock. */
  get offsetFromProcessMs(): number {
    return this.offsetMs;
  }

  async start(): Promise<void> {
    await this.sync();
    this.timer = setInterval(() => void this.sync().catch(() => {}), RESYNC_MS);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
  }

  /** Measures the offset again; keeps the old one when every round trip failed. */
  async sync(): Promise<void> {
    let best: { offsetMs: number; roundTripMs: number } | undefined;
    for (let i = 0; i < SAMPLES; i++) {
      const sent = this.processNow();
      const [seconds, micros] = (await this.redis.eval(readTime, 1, redisKeys.clock)) as [number, number];
      const received = this.processNow();
      const roundTripMs = received - sent;
      const offsetMs = seconds * 1000 + micros / 1000 - (sent + received) / 2;
      if (!best || roundTripMs < best.roundTripMs) best = { offsetMs, roundTripMs };
    }
    this.offsetMs = best!.offsetMs;
    this.uncertainty = best!.roundTripMs / 2;
  }

  private processNow(): number {
    // Monotonic, at sub-millisecond resolution (Date.now() rounds to 1 ms and may step).
    return performance.timeOrigin + performance.now() + this.processSkewMs;
  }
}
