import { describe, expect, it } from 'vitest';
import { mergeSlices, type RoundResult } from '../../loadtest/runner/round.js';

// A case measured in turns with another (RunContext.measureInTurns) is reported as one round: its slices merged.

const slice = (answers: number, perSecond: number): RoundResult => ({
  title: 'slice',
  responses: answers,
  statusCounts: { 409: answers },
  durationSeconds: answers / perSecond + 0.01,
  ratePerSecond: { 409: perSecond },
  latencyMs: { p50: 0, p97_5: 0, p99: 0, max: 0 },
});

describe('a round measured in slices', () => {
  it('has the rate of all its answers over the time the slices took at their steady rates', () => {
    // 100 answers at 1,000/s and 300 at 1,500/s: 400 answers in 0.3 s, not the slices' mean rate (1,250/s).
    const merged = mergeSlices('refusals', [slice(100, 1_000), slice(300, 1_500)], []);
    expect(merged.ratePerSecond['409']).toBeCloseTo(400 / 0.3, 6);
    expect(merged.statusCounts).toEqual({ 409: 400 });
    expect(merged.responses).toBe(400);
    expect(merged.durationSeconds).toBeCloseTo(0.32, 6);
  });

  it('summarises the latencies of every answer of every slice', () => {
    const latencies = Array.from({ length: 400 }, (_, i) => i + 1);
    const merged = mergeSlices('refusals', [slice(100, 1_000), slice(300, 1_500)], latencies);
    expect(merged.latencyMs).toEqual({ p50: 200, p97_5: 390, p99: 396, max: 400 });
  });

  it('counts the units answered per SKU over every slice, for the books of spread traffic', () => {
    const spread = (answeredBySku: Record<string, number>) => ({ ...slice(10, 1_000), answeredBySku });
    const merged = mergeSlices('spread', [spread({ a: 3, b: 7 }), spread({ b: 2, c: 8 })], []);
    expect(merged.answeredBySku).toEqual({ a: 3, b: 9, c: 8 });
    expect(mergeSlices('hot', [slice(10, 1_000), slice(10, 1_000)], []).answeredBySku).toBeUndefined();
  });
});
