import { writeFileSync } from 'node:fs';
import path from 'node:path';
import * as vega from 'vega';
import { compile, type TopLevelSpec } from 'vega-lite';
import type { RunResults } from '../results.js';
import { RunFigures } from './figures.js';
import { expectedSafe } from './targets.js';

const WIDTH = 520;
const config = { font: 'Helvetica, Arial, sans-serif', view: { stroke: null }, axis: { grid: true, gridOpacity: 0.4 } };
const log2 = { type: 'log', base: 2 } as const;
const legend = { title: null, legend: { orient: 'top-left', labelLimit: 320 } } as const;
const segmentsAxis = (values: number[]) => ({
  scale: log2,
  axis: { values: [...new Set(values)] },
  title: 'segments (N)',
});

/** Renders the report's charts to SVG with vega-lite into `dir`; answers each chart's name, title and file. */
export async function renderCharts(
  run: RunResults,
  dir: string,
): Promise<{ name: string; title: string; file: string }[]> {
  const f = new RunFigures(run);
  const profileName = (p: string) =>
    p === 'real' ? 'real critical section' : `${run.meta.settings.businessStepMs} ms business step, combining off`;
  const sales = [...f.profile('real'), ...f.profile('business-step')];
  const points = sales.map((c) => ({
    segments: c.segments,
    ordersPerSecond: c.ordersPerSecond,
    profile: profileName(c.profile),
    speedup: f.speedup(c),
  }));
  const segments = points.map((p) => p.segments);
  const ceiling = Number.isFinite(f.ceiling)
    ? [{ ceiling: f.ceiling, label: `HTTP ceiling ${Math.round(f.ceiling)}/s` }]
    : [];
  const charts: [name: string, title: string, spec: object][] = [];
  if (sales.length) {
    charts.push([
      'throughput-vs-segments',
      'Successful orders per second vs segment count',
      {
        title: { text: 'Orders/s vs segment count', subtitle: `${run.meta.settings.connections} connections, one run` },
        width: WIDTH,
        height: 300,
        layer: [
          {
            data: { values: points },
            mark: { type: 'line', point: true },
            encoding: {
              x: { field: 'segments', type: 'quantitative', ...segmentsAxis(segments) },
              y: { field: 'ordersPerSecond', type: 'quantitative', title: 'successful orders / s' },
              color: { field: 'profile', type: 'nominal', ...legend },
            },
          },
          {
            data: { values: ceiling },
            mark: { type: 'rule', strokeDash: [6, 4], color: '#888' },
            encoding: { y: { field: 'ceiling', type: 'quantitative' } },
          },
          {
            data: { values: ceiling },
            mark: { type: 'text', align: 'right', dy: -6, x: WIDTH, color: '#666' },
            encoding: { y: { field: 'ceiling', type: 'quantitative' }, text: { field: 'label', type: 'nominal' } },
          },
        ],
      },
    ]);
    const ideal = [...new Set(segments)].flatMap((n) => [
      { segments: n, speedup: n, line: 'ideal: N' },
      { segments: n, speedup: 0.9 * n, line: 'target: 0.9 × N' },
    ]);
    charts.push([
      'speedup-vs-segments',
      'Speed-up over the single lock vs segment count',
      {
        title: {
          text: 'Speed-up over the single lock',
          subtitle: 'orders/s at N segments ÷ orders/s with 1 segment, same profile',
        },
        width: WIDTH,
        height: 300,
        layer: [
          {
            data: { values: ideal },
            mark: { type: 'line', strokeDash: [4, 4], color: '#aaa' },
            encoding: {
              x: { field: 'segments', type: 'quantitative', scale: log2 },
              y: { field: 'speedup', type: 'quantitative', scale: log2 },
              detail: { field: 'line' },
            },
          },
          {
            data: { values: points.filter((p) => Number.isFinite(p.speedup)) },
            mark: { type: 'line', point: true },
            encoding: {
              x: { field: 'segments', type: 'quantitative', ...segmentsAxis(segments) },
              y: {
                field: 'speedup',
                type: 'quantitative',
                scale: log2,
                title: 'speed-up (×, log scale; dashed: N and 0.9 × N)',
              },
              color: { field: 'profile', type: 'nominal', ...legend },
            },
          },
        ],
      },
    ]);
    const percentiles = sales.flatMap((c) =>
      (['p50', 'p97_5', 'p99', 'max'] as const).map((p) => ({
        order: c.segments,
        percentile: p.replace('_', '.'),
        ms: Math.max(c.measured.latencyMs[p], 0.1),
        profile: profileName(c.profile),
      })),
    );
    charts.push([
      'latency-percentiles',
      'Order latency percentiles by segment count',
      {
        title: { text: 'Order latency percentiles', subtitle: 'all answers of the measured round, log scale' },
        data: { values: percentiles },
        facet: { row: { field: 'profile', type: 'nominal', title: null } },
        spec: {
          width: WIDTH,
          height: 180,
          mark: { type: 'line', point: true },
          encoding: {
            x: { field: 'order', type: 'quantitative', ...segmentsAxis(segments) },
            y: { field: 'ms', type: 'quantitative', scale: { type: 'log' }, title: 'latency (ms, log scale)' },
            color: { field: 'percentile', type: 'nominal', sort: ['p50', 'p97.5', 'p99', 'max'], title: null },
          },
        },
      },
    ]);
  }
  const bar = (label: string, perSecond: number, kind: string) => ({ label, perSecond, kind });
  const comparisons = [
    ...ceiling.map((c) => bar('HTTP ceiling', c.ceiling, 'ceiling')),
    ...[f.at('real', 1), f.at('real')].flatMap((c) =>
      c
        ? [bar(`product, ${c.segments === 1 ? 'single lock' : `${c.segments} segments`}`, c.ordersPerSecond, 'product')]
        : [],
    ),
    ...run.alternative.filter((c) => !c.traffic).map((c) => bar('the alternative', c.ordersPerSecond, 'alternative')),
    ...run.lockFree.map((c) => bar(c.label.replace(/^lock-free · /, ''), c.ordersPerSecond, 'lock-free baseline')),
    ...run.soldOut.map((c) => bar('sold out: 409 answers', c.refusalsPerSecond, 'product')),
  ];
  if (comparisons.length > 1) {
    charts.push([
      'baselines',
      'The product against the HTTP ceiling and lock-free baselines',
      {
        title: { text: 'Answers per second, real critical section', subtitle: 'same machine, same run' },
        width: WIDTH,
        data: { values: comparisons },
        mark: 'bar',
        encoding: {
          y: { field: 'label', type: 'nominal', sort: null, title: null, axis: { labelLimit: 320 } },
          x: { field: 'perSecond', type: 'quantitative', title: 'answers / s' },
          color: { field: 'kind', type: 'nominal', title: null, legend: { orient: 'bottom' } },
        },
      },
    ]);
  }
  const first = run.oversell[0];
  if (first) {
    const guards = ['no shared lock', 'lock shared by every caller'];
    const values = run.oversell.map((c) => ({
      label: c.label.replace(/^oversell · /, ''),
      oversold: c.books.oversold,
      guard: guards[Number(expectedSafe(c))],
    }));
    charts.push([
      'oversell',
      'Units oversold in the oversell demonstration',
      {
        title: { text: 'Units oversold', subtitle: `stock ${first.stock}, ${first.requests} one-unit orders at once` },
        width: WIDTH,
        data: { values },
        encoding: {
          y: { field: 'label', type: 'nominal', sort: null, title: null, axis: { labelLimit: 320 } },
          x: { field: 'oversold', type: 'quantitative', title: 'units sold beyond the stock' },
        },
        layer: [
          {
            mark: 'bar',
            encoding: {
              color: {
                field: 'guard',
                type: 'nominal',
                title: null,
                scale: { range: ['#d62728', '#2ca02c'], domain: guards },
                legend: { orient: 'bottom', labelLimit: 320 },
              },
            },
          },
          {
            mark: { type: 'text', align: 'left', dx: 4 },
            encoding: { text: { field: 'oversold', type: 'quantitative' } },
          },
        ],
      },
    ]);
  }
  return Promise.all(
    charts.map(async ([name, title, spec]) => {
      const view = new vega.View(vega.parse(compile({ ...spec, config } as TopLevelSpec).spec), { renderer: 'none' });
      const file = path.join(dir, `${name}.svg`);
      writeFileSync(file, await view.toSVG());
      view.finalize();
      return { name, title, file };
    }),
  );
}
