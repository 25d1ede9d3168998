import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import * as vega from 'vega';
import { compile, type TopLevelSpec } from 'vega-lite';
import { expectedSafe, oversellName, type RunFigures } from './figures.js';
import { lockName } from '../scenarios/plan.js';

// The vega-lite specs live beside the template; a chart is drawn when the data set it needs has rows.
const CHARTS = new URL('../../../loadtest/report/charts.json', import.meta.url);
type Chart = { name: string; title: string; needs: string; spec: object };

/** Renders the report's charts to SVG into `dir`; answers each chart's name, title and file. */
export async function renderCharts(f: RunFigures, dir: string) {
  const { run } = f;
  const { businessStepMs, connections } = run.meta.settings;
  const sales = [...f.sweep('real'), ...f.sweep('business-step')];
  const profile = (p: string) =>
    p === 'real' ? 'real critical section' : `${businessStepMs} ms business step, combining off`;
  const points = sales.map((c) => ({ ...c, profile: profile(c.profile), speedup: f.speedup(c) }));
  const segmentCounts = [...new Set(sales.map((c) => c.segments))];
  const ceiling = Number.isFinite(f.ceiling)
    ? [{ ceiling: f.ceiling, label: `HTTP ceiling ${Math.round(f.ceiling)}/s` }]
    : [];
  const bar = (label: string, perSecond: number, kind: string) => ({ label, perSecond, kind });
  const comparisons = [
    ...ceiling.map((c) => bar('HTTP ceiling', c.ceiling, 'ceiling')),
    ...f.product.map((c) => bar(`product, ${lockName(c.segments)}`, c.perSecond, 'product')),
    ...[f.alternativeFor({})].flatMap((c) => (c ? bar('the alternative', c.perSecond, 'alternative') : [])),
    ...run.lockFree.map((c) => bar(c.label.replace(/^lock-free · /, ''), c.perSecond, 'lock-free baseline')),
    ...f.refusals.map((c) => bar(`${c.label.split(' · ')[0]}: 409 answers`, c.perSecond, 'product')),
  ];
  const datasets: Record<string, object[]> = {
    sales: points,
    ceiling,
    ideal: segmentCounts.flatMap((n) => [
      { segments: n, speedup: n, line: 'ideal: N' },
      { segments: n, speedup: 0.9 * n, line: 'target: 0.9 × N' },
    ]),
    speedups: points.filter((p) => Number.isFinite(p.speedup)),
    latencies: points.flatMap((c) =>
      (['p50', 'p97_5', 'p99', 'max'] as const).map((p) => ({
        ...c,
        percentile: p.replace('_', '.'),
        ms: Math.max(c.measured.latencyMs[p], 0.1),
      })),
    ),
    comparisons: comparisons.length > 1 ? comparisons : [],
    oversold: run.oversell.map((c) => ({
      label: oversellName(c),
      oversold: c.books.oversold,
      guard: expectedSafe(c) ? 'lock shared by every caller' : 'no shared lock',
    })),
  };
  const first = run.oversell[0];
  const values: Record<string, unknown> = {
    connections,
    segmentCounts,
    oversellStock: first?.stock,
    oversellRequests: first?.requests,
  };
  // A string that is one slot takes the value as it is (a list of numbers); a slot inside a string, as text.
  const text = readFileSync(CHARTS, 'utf8')
    .replace(/"\{\{(\w+)\}\}"/g, (_, name: string) => JSON.stringify(values[name]))
    .replace(/\{\{(\w+)\}\}/g, (_, name: string) => String(values[name]));
  const { config, charts } = JSON.parse(text) as { config: object; charts: Chart[] };
  return Promise.all(
    charts
      .filter((chart) => datasets[chart.needs]!.length)
      .map(async ({ name, title, spec }) => {
        const vl = compile({ ...spec, config, datasets } as TopLevelSpec).spec;
        const view = new vega.View(vega.parse(vl), { renderer: 'none' });
        const file = path.join(dir, `${name}.svg`);
        writeFileSync(file, await view.toSVG());
        view.finalize();
        return { name, title, file };
      }),
  );
}
