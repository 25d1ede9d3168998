import { describe, expect, it } from 'vitest';
import { runFigures, times } from '../../loadtest/report/figures.js';
import { judgeTargets } from '../../loadtest/report/targets.js';
import { renderReport, verdictOf } from '../../loadtest/report/write-report.js';
import type { RunResults } from '../../loadtest/run-results.js';
import { presets } from '../../loadtest/scenarios/context.js';
import { emptyCases } from '../../loadtest/scenarios/plan.js';

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
  const alternative = [
    ...rounds('alternative-hot', [1_200, 1_750, 2_100]),
    ...rounds('alternative-spread', [1_500, 2_500, 2_000], { traffic: 'spread', p99: 50 }),
  ];
  return {
    // Every other list of cases empty: this run measured the comparisons only.
    ...emptyCases(),
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
    const targets = judgeTargets(f);
    // A target answers its cases and ratios; the template formats them.
    type Compared = { ours: Rate; theirs?: Rate; echo?: Rate; ratio: number; rounds: number[]; met: boolean };
    type Rate = { perSecond: number; measured: { latencyMs: { p99: number } } };
    const shown = (target: unknown) => {
      const { ours, theirs, echo, ratio, rounds, met } = target as Compared;
      const yardstick = (theirs ?? echo)!.perSecond;
      return { ours: ours.perSecond, yardstick, ratio: times(ratio), rounds: rounds.map(times).join(', '), met };
    };
    expect(shown(targets.alternative)).toEqual({
      ...{ ours: 3_000, yardstick: 1_200, ratio: '×2.50', rounds: '×2.50, ×2.63, ×1.86', met: true },
    });
    expect(shown(targets.echo)).toEqual({
      ...{ ours: 4_600, yardstick: 6_200, ratio: '×0.74', rounds: '×0.75, ×0.74, ×0.60', met: true },
    });
    expect(shown(targets.spread)).toMatchObject({ ratio: '×1.33', rounds: '×1.33, ×1.04, ×1.50', met: true });
    expect((targets.spread as Compared).ours.measured.latencyMs.p99).toBe(45);
  });
});

const meta = (mode: 'quick' | 'full') => ({
  mode,
  settings: presets[mode],
  startedAt: '2026-11-27T00:00:00.000Z',
  finishedAt: '2026-11-27T00:05:00.000Z',
  cpus: { count: 2, model: 'test' },
  memoryBytes: 2 ** 30,
});

describe('the report and the verdict a run ends with', () => {
  it('open with the headline, then count the targets judged and name each one not met with its figure', () => {
    const results = { ...run(), meta: meta('full') } as unknown as RunResults;
    // The hot SKU falls below 0.7 × the echo in its median round: not met.
    results.bareEcho = rounds('bare-echo', [8_000, 9_000, 9_500]) as unknown as RunResults['bareEcho'];
    const report = renderReport(results, 'results.json');
    expect(
      report
        .split('\n## ')
        .map((section) => section.split('\n')[0])
        .slice(1, 4),
    ).toEqual(['Headline', 'Verdict', 'Analysis']);
    const verdict = verdictOf(report);
    expect(verdict).toContain('- One hot SKU: 3,000 orders/s against 1,200/s: ×2.50 the alternative.');
    expect(verdict.slice(verdict.indexOf('Verdict'))).toEqual([
      'Verdict',
      '3 of 4 targets judged in this run met. Not met:',
      '- real critical section: 20 segments ≥ 0.7 × the bare express echo: 3,900/s vs 9,500/s: ×0.41 (rounds ×0.38, ×0.51, ×0.41)',
    ]);
    expect(report).not.toContain('No analysis has been written');
  });

  it('says a quick run is a smoke test and judges only its books', () => {
    const quick = { ...run(), meta: meta('quick') } as unknown as RunResults;
    const verdict = verdictOf(renderReport(quick, 'results.json'));
    expect(verdict.slice(verdict.indexOf('Verdict') + 1)).toEqual([
      expect.stringMatching(
        /^A quick run is a smoke test: .* only the books, the oversell demonstration and the drop's line order are judged/,
      ),
      '1 of 1 targets judged in this run met. Not met:',
      'None.',
    ]);
  });
});
