import { writeFileSync } from 'node:fs';
import path from 'node:path';
import * as vega from 'vega';
import { compile, type TopLevelSpec } from 'vega-lite';
import type { RunResults } from '../results.js';
import { RunFigures } from './figures.js';
import { expectedSafe } from './targets.js';

export interface Chart {
  file: string;
  title: string;
}

const WIDTH = 520;
const HEIGHT = 300;
const config = { font: 'Helvetica, Arial, sans-serif', view: { stroke: null }, axis: { grid: true, gridOpacity: 0.4 } };

/** Renders the report's charts to SVG with vega-lite; returns them with paths relative to `dir`'s parent doc. */
export async function renderCharts(run: RunResults, dir: string): Promise<Chart[]> {
  const f = new RunFigures(run);
  const stepLabel = `${run.meta.settings.businessStepMs} ms business step, combining off`;
  const profileName = (p: string) => (p === 'real' ? 'real critical section' : stepLabel);
  const charts: { name: string; title: string; spec: TopLevelSpec }[] = [];

  const sales = [...f.profile('real'), ...f.profile('business-step')];
  if (sales.length) {
    const points = sales.map((c) => ({
      segments: c.segments,
      ordersPerSecond: c.ordersPerSecond,
      profile: profileName(c.profile),
      speedup: f.speedup(c),
    }));
    const ceiling = Number.isFinite(f.ceiling)
      ? [{ ceiling: f.ceiling, label: `HTTP ceiling ${Math.round(f.ceiling)}/s` }]
      : [];
    charts.push({
      name: 'throughput-vs-segments',
      title: 'Successful orders per second vs segment count',
      spec: {
        $schema: 'https://vega.github.io/schema/vega-lite/v6.json',
        title: { text: 'Orders/s vs segment count', subtitle: `${run.meta.settings.connections} connections, one run` },
        width: WIDTH,
        height: HEIGHT,
        config,
        layer: [
          {
            data: { values: points },
            mark: { type: 'line', point: true },
            encoding: {
              x: {
                field: 'segments',
                type: 'quantitative',
                scale: { type: 'log', base: 2 },
                axis: { values: [...new Set(points.map((p) => p.segments))] },
                title: 'segments (N)',
              },
              y: { field: 'ordersPerSecond', type: 'quantitative', title: 'successful orders / s' },
              color: {
                field: 'profile',
                type: 'nominal',
                title: null,
                legend: { orient: 'top-left', labelLimit: 320 },
              },
            },
          },
          ...(ceiling.length
            ? [
                {
                  data: { values: ceiling },
                  mark: { type: 'rule' as const, strokeDash: [6, 4], color: '#888' },
                  encoding: { y: { field: 'ceiling', type: 'quantitative' as const } },
                },
                {
                  data: { values: ceiling },
                  mark: { type: 'text' as const, align: 'right' as const, dy: -6, x: WIDTH, color: '#666' },
                  encoding: {
                    y: { field: 'ceiling', type: 'quantitative' as const },
                    text: { field: 'label', type: 'nominal' as const },
                  },
                },
              ]
            : []),
        ],
      },
    });

    const ideal = [...new Set(points.map((p) => p.segments))].flatMap((segments) => [
      { segments, speedup: segments, line: 'ideal: N' },
      { segments, speedup: 0.9 * segments, line: 'target: 0.9 × N' },
    ]);
    charts.push({
      name: 'speedup-vs-segments',
      title: 'Speed-up over the single lock vs segment count',
      spec: {
        $schema: 'https://vega.github.io/schema/vega-lite/v6.json',
        title: {
          text: 'Speed-up over the single lock',
          subtitle: 'orders/s at N segments ÷ orders/s with 1 segment, same profile',
        },
        width: WIDTH,
        height: HEIGHT,
        config,
        layer: [
          {
            data: { values: ideal },
            mark: { type: 'line', strokeDash: [4, 4], color: '#aaa' },
            encoding: {
              x: { field: 'segments', type: 'quantitative', scale: { type: 'log', base: 2 } },
              y: { field: 'speedup', type: 'quantitative', scale: { type: 'log', base: 2 } },
              detail: { field: 'line', type: 'nominal' },
            },
          },
          {
            data: { values: points.filter((p) => Number.isFinite(p.speedup)) },
            mark: { type: 'line', point: true },
            encoding: {
              x: {
                field: 'segments',
                type: 'quantitative',
                scale: { type: 'log', base: 2 },
                axis: { values: [...new Set(points.map((p) => p.segments))] },
                title: 'segments (N)',
              },
              y: {
                field: 'speedup',
                type: 'quantitative',
                scale: { type: 'log', base: 2 },
                title: 'speed-up (×, log scale; dashed: N and 0.9 × N)',
              },
              color: {
                field: 'profile',
                type: 'nominal',
                title: null,
                legend: { orient: 'top-left', labelLimit: 320 },
              },
            },
          },
        ],
      },
    });

    const percentiles = sales.flatMap((c) =>
      (
        [
          ['p50', c.measured.latencyMs.p50],
          ['p97.5', c.measured.latencyMs.p97_5],
          ['p99', c.measured.latencyMs.p99],
          ['max', c.measured.latencyMs.max],
        ] as const
      ).map(([percentile, value]) => ({
        segments: `N=${c.segments}`,
        order: c.segments,
        percentile,
        ms: Math.max(value, 0.1),
        profile: profileName(c.profile),
      })),
    );
    charts.push({
      name: 'latency-percentiles',
      title: 'Order latency percentiles by segment count',
      spec: {
        $schema: 'https://vega.github.io/schema/vega-lite/v6.json',
        title: { text: 'Order latency percentiles', subtitle: 'all answers of the measured round, log scale' },
        config,
        data: { values: percentiles },
        facet: { row: { field: 'profile', type: 'nominal', title: null } },
        spec: {
          width: WIDTH,
          height: 180,
          mark: { type: 'line', point: true },
          encoding: {
            x: {
              field: 'order',
              type: 'quantitative',
              scale: { type: 'log', base: 2 },
              axis: { values: [...new Set(percentiles.map((p) => p.order))] },
              title: 'segments (N)',
            },
            y: { field: 'ms', type: 'quantitative', scale: { type: 'log' }, title: 'latency (ms, log scale)' },
            color: { field: 'percentile', type: 'nominal', sort: ['p50', 'p97.5', 'p99', 'max'], title: null },
          },
        },
      },
    });
  }

  const comparisons = [
    ...(Number.isFinite(f.ceiling) ? [{ label: 'HTTP ceiling', perSecond: f.ceiling, kind: 'ceiling' }] : []),
    ...[f.singleLock('real'), f.headline('real')]
      .filter((c) => c !== undefined)
      .map((c) => ({
        label: `product, ${c.segments === 1 ? 'single lock' : `${c.segments} segments`}`,
        perSecond: c.ordersPerSecond,
        kind: 'product',
      })),
    ...run.alternative
      .filter((c) => !c.traffic)
      .map((c) => ({ label: 'the alternative', perSecond: c.ordersPerSecond, kind: 'alternative' })),
    ...run.lockFree.map((c) => ({
      label: c.label.replace(/^lock-free · /, ''),
      perSecond: c.ordersPerSecond,
      kind: 'lock-free baseline',
    })),
    ...run.soldOut.map((c) => ({ label: `sold out: 409 answers`, perSecond: c.refusalsPerSecond, kind: 'product' })),
  ];
  if (comparisons.length > 1) {
    charts.push({
      name: 'baselines',
      title: 'The product against the HTTP ceiling and lock-free baselines',
      spec: {
        $schema: 'https://vega.github.io/schema/vega-lite/v6.json',
        title: { text: 'Answers per second, real critical section', subtitle: 'same machine, same run' },
        width: WIDTH,
        config,
        data: { values: comparisons },
        mark: 'bar',
        encoding: {
          y: { field: 'label', type: 'nominal', sort: null, title: null, axis: { labelLimit: 320 } },
          x: { field: 'perSecond', type: 'quantitative', title: 'answers / s' },
          color: { field: 'kind', type: 'nominal', title: null, legend: { orient: 'bottom' } },
        },
      },
    });
  }

  if (run.oversell.length) {
    charts.push({
      name: 'oversell',
      title: 'Units oversold in the oversell demonstration',
      spec: {
        $schema: 'https://vega.github.io/schema/vega-lite/v6.json',
        title: {
          text: 'Units oversold',
          subtitle: `stock ${run.oversell[0]!.stock}, ${run.oversell[0]!.requests} one-unit orders at once`,
        },
        width: WIDTH,
        config,
        data: {
          values: run.oversell.map((c) => ({
            label: c.label.replace(/^oversell · /, ''),
            oversold: c.books.oversold,
            guard: expectedSafe(c) ? 'lock shared by every caller' : 'no shared lock',
          })),
        },
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
                scale: { range: ['#d62728', '#2ca02c'], domain: ['no shared lock', 'lock shared by every caller'] },
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
    });
  }

  const out: Chart[] = [];
  for (const chart of charts) {
    const view = new vega.View(vega.parse(compile(chart.spec).spec), { renderer: 'none' });
    const svg = await view.toSVG();
    view.finalize();
    const file = path.join(dir, `${chart.name}.svg`);
    writeFileSync(file, svg);
    out.push({ file, title: chart.title });
  }
  return out;
}
