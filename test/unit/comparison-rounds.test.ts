import { describe, expect, it } from 'vitest';
import { runFigures } from '../../loadtest/report/figures.js';
import { targetSlots, verdict } from '../../loadtest/report/targets.js';
import type { RunResults } from '../../loadtest/run-results.js';
import { presets } from '../../loadtest/scenarios/context.js';

// How the load-test report judges a comparison measured in rounds: by the median of the rounds' ratios, each round's
// two sides set against each other, never one side's median round against the other's.

type Shape = { id: string; perSecond: number; round?: number; traffic?: 'spread' | 'mixed'; p99?: number };
const measuredCase = ({ p99 = 40, ...c }: Shape) => ({
  label: `${c.id} · round ${c.round ?? '?'}`,
  segments: 20,
  measured: { latencyMs: { p50: 10, p97_5: p99, p99, max: p99 }, statusCounts: {} },
  cpu: null,
  books: { ok: true, checks: [] },
  warmupBooks: { ok: true, checks: [] },
  ...c,
});
/** One case per round: perSecond of round 1, 2, 3. */
const rounds = (id: string, rates: number[], more: Partial<Shape> = {}) =>
  rates.map((perSecond, i) => measuredCase({ id, perSecond, round: i + 1, ...more }));

function run(): RunResults {
  // Every other list of cases empty: this run measured the comparisons only.
  const others = ['segments', 'cluster', 'perOrder', 'lockFree', 'memory', 'auth', 'events', 'lockOrderFlow'];
  others.push('ceiling', 'oversell', 'soldOut', 'lifecycle', 'dashboard', 'growth', 'eventRetention', 'locks');
  const alternative = [
    ...rounds('alternative-hot', [1_200, 1_750, 2_100]),
    ...rounds('alternative-spread', [1_500, 2_500, 2_000], { traffic: 'spread', p99: 50 }),
  ];
  return {
    ...Object.fromEntries([...others, 'skipped', 'incidents'].map((k) => [k, []])),
    meta: { settings: presets.full },
    // The product's hot SKU against the alternative: round ratios ×2.50, ×2.63, ×1.86 (median: round 1); against
    // the echo ×0.75, ×0.74, ×0.60 (median: round 2). Each side's median round alone would give ×2.23 and ×0.63;
    // on spread traffic ×1.33, ×1.04, ×1.50 (median: round 1), against ×1.30 by each side's median.
    spread: [
      ...rounds('real-hot', [3_000, 4_600, 3_900]),
      ...rounds('real-spread', [2_000, 2_600, 3_000], { traffic: 'spread', p99: 45 }),
    ],
    // Cases are paired by their round, not their place: listed last round first.
    alternative: alternative.reverse(),
    bareEcho: rounds('bare-echo', [4_000, 6_200, 6_500]),
  } as unknown as RunResults;
}

describe('a comparison measured in rounds', () => {
  const f = runFigures(run());

  it('is judged on its median round by the ratio of the round’s two sides', () => {
    expect(f.hotBeside?.perSecond).toBe(3_000);
    expect(f.alternativeFor(f.hotBeside!)?.perSecond).toBe(1_200);
    expect(f.overAlternative(f.hotBeside!)).toBeCloseTo(2.5);
    expect(f.hotOverEcho?.perSecond).toBe(4_600);
    expect(f.echoFor(f.hotOverEcho!)?.perSecond).toBe(6_200);
    expect(f.traffic('spread')?.perSecond).toBe(2_000);
    expect(f.alternativeFor(f.traffic('spread')!)?.perSecond).toBe(1_500);
  });

  it('sets a case outside the rounds against the yardstick’s median round by rate', () => {
    const sweepCase = measuredCase({ id: 'real-20', perSecond: 3_500 });
    expect(f.alternativeFor(sweepCase)?.perSecond).toBe(1_750);
    expect(f.echoFor(sweepCase)?.perSecond).toBe(6_200);
    // The share of the ceiling has no yardstick in the rounds: the hot SKU's median round by rate.
    expect(f.hot?.perSecond).toBe(3_900);
  });

  it('states every round’s ratio and judges the median one in the targets', () => {
    const slots = targetSlots(f);
    expect(slots['target:alternative']).toBe('3,000/s vs 1,200/s: ×2.50, the median of ×2.50, ×2.63, ×1.86 | **met**');
    expect(slots['target:echo']).toBe('4,600/s vs 6,200/s: ×0.74, the median of ×0.75, ×0.74, ×0.60 | **met**');
    expect(slots['target:spread']).toMatch(
      /^2,000\/s vs 1,500\/s: ×1\.33, the median of ×1\.33, ×1\.04, ×1\.50; p99 45\.0 vs 50\.0 ms in that round \| \*\*met\*\*$/,
    );
  });
});

describe('the verdict a run ends with', () => {
  it('counts the targets measured and names each one not met with its figure, one line each', () => {
    const results = run();
    // The hot SKU falls below 0.55 × the echo in its median round: not met.
    results.bareEcho = rounds('bare-echo', [8_000, 9_000, 9_500]) as unknown as RunResults['bareEcho'];
    expect(verdict(runFigures(results))).toEqual([
      'verdict: 3 of 4 targets measured met; not met:',
      '  echo: 3,900/s vs 9,500/s: ×0.41, the median of ×0.38, ×0.51, ×0.41',
    ]);
    // No ceiling was measured: the share of it is not judged.
    expect(verdict(f())).toEqual(['verdict: 4 of 4 targets measured met']);
  });

  it('says a quick run is a smoke test and judges only its books', () => {
    const quick = { ...run(), meta: { mode: 'quick', settings: presets.quick } } as unknown as RunResults;
    expect(verdict(runFigures(quick))).toEqual([
      'quick run: a smoke test, its rates and ratios are not judged (run without --quick for that)',
      'verdict: 1 of 1 targets measured met',
    ]);
  });
});

function f() {
  return runFigures(run());
}
