import { writeFileSync } from 'node:fs';
import path from 'node:path';
import * as vega from 'vega';
import { compile, type TopLevelSpec } from 'vega-lite';
import { expectedSafe, type RunFigures } from './figures.js';

const WIDTH = 520;
const config = { font: 'Helvetica, Arial, sans-serif', view: { stroke: null }, axis: { grid: true, gridOpacity: 0.4 } };
const log2 = { type: 'log', base: 2 };
const quantitative = (field: string, more: object = {}) => ({ field, type: 'quantitative', ...more });
const nominal = (field: string, more: object = {}) => ({ field, type: 'nominal', title: null, ...more });
const labels = { sort: null, axis: { labelLimit: 320 } };
const title = (text: string, subtitle: string) => ({ title: { text, subtitle }, width: WIDTH });

/** Renders the report's charts to SVG with vega-lite into `dir`; answers each chart's name, title and file. */
export async function renderCharts(f: RunFigures, dir: string) {
  const { run } = f;
  const { businessStepMs, connections } = run.meta.settings;
  const charts: [name: string, title: string, spec: object][] = [];
  const sales = [...f.sweep('real'), ...f.sweep('business-step')];
  const profile = (p: string) =>
    p === 'real' ? 'real critical section' : `${businessStepMs} ms business step, combining off`;
  const points = sales.map((c) => ({
    segments: c.segments,
    perSecond: c.perSecond,
    profile: profile(c.profile),
    speedup: f.speedup(c),
  }));
  const axisValues = { values: [...new Set(points.map((p) => p.segments))] };
  const segments = quantitative('segments', { scale: log2, axis: axisValues, title: 'segments (N)' });
  /** One line per profile over the segment counts. */
  const byProfile = (values: object[], y: object) => ({
    data: { values },
    mark: { type: 'line', point: true },
    encoding: { x: segments, y, color: nominal('profile', { legend: { orient: 'top-left', labelLimit: 320 } }) },
  });
  const ceiling = Number.isFinite(f.ceiling)
    ? [{ ceiling: f.ceiling, label: `HTTP ceiling ${Math.round(f.ceiling)}/s` }]
    : [];
  if (sales.length) {
    const ceilingLine = { data: { values: ceiling }, encoding: { y: quantitative('ceiling') } };
    const ceilingLabel = { type: 'text', align: 'right', dy: -6, x: WIDTH, color: '#666' };
    charts.push([
      'throughput-vs-segments',
      'Successful orders per second vs segment count',
      {
        ...title('Orders/s vs segment count', `${connections} connections, one run`),
        height: 300,
        layer: [
          byProfile(points, quantitative('perSecond', { title: 'successful orders / s' })),
          { ...ceilingLine, mark: { type: 'rule', strokeDash: [6, 4], color: '#888' } },
          {
            ...ceilingLine,
            mark: ceilingLabel,
            encoding: { ...ceilingLine.encoding, text: { field: 'label', type: 'nominal' } },
          },
        ],
      },
    ]);
    const ideal = [...new Set(sales.map((c) => c.segments))].flatMap((n) => [
      { segments: n, speedup: n, line: 'ideal: N' },
      { segments: n, speedup: 0.9 * n, line: 'target: 0.9 × N' },
    ]);
    const speedup = (more: object = {}) => quantitative('speedup', { scale: log2, ...more });
    const idealMark = { type: 'line', strokeDash: [4, 4], color: '#aaa' };
    const idealEncoding = { x: quantitative('segments', { scale: log2 }), y: speedup(), detail: { field: 'line' } };
    charts.push([
      'speedup-vs-segments',
      'Speed-up over the single lock vs segment count',
      {
        ...title('Speed-up over the single lock', 'orders/s at N segments ÷ orders/s with 1 segment, same profile'),
        height: 300,
        layer: [
          { data: { values: ideal }, mark: idealMark, encoding: idealEncoding },
          byProfile(
            points.filter((p) => Number.isFinite(p.speedup)),
            speedup({ title: 'speed-up (×, log scale; dashed: N and 0.9 × N)' }),
          ),
        ],
      },
    ]);
    const percentiles = ['p50', 'p97_5', 'p99', 'max'] as const;
    const latencies = sales.flatMap((c) =>
      percentiles.map((p) => ({
        segments: c.segments,
        percentile: p.replace('_', '.'),
        profile: profile(c.profile),
        ms: Math.max(c.measured.latencyMs[p], 0.1),
      })),
    );
    const y = quantitative('ms', { scale: { type: 'log' }, title: 'latency (ms, log scale)' });
    const color = nominal('percentile', { sort: percentiles.map((p) => p.replace('_', '.')) });
    charts.push([
      'latency-percentiles',
      'Order latency percentiles by segment count',
      {
        title: { text: 'Order latency percentiles', subtitle: 'all answers of the measured round, log scale' },
        data: { values: latencies },
        facet: { row: nominal('profile') },
        spec: { width: WIDTH, height: 180, mark: { type: 'line', point: true }, encoding: { x: segments, y, color } },
      },
    ]);
  }
  const bar = (label: string, perSecond: number, kind: string) => ({ label, perSecond, kind });
  const product = [f.at('real', 1), f.at('real')].filter((c) => c !== undefined);
  const comparisons = [
    ...ceiling.map((c) => bar('HTTP ceiling', c.ceiling, 'ceiling')),
    ...product.map((c) =>
      bar(`product, ${c.segments === 1 ? 'single lock' : `${c.segments} segments`}`, c.perSecond, 'product'),
    ),
    ...run.alternative.filter((c) => !c.traffic).map((c) => bar('the alternative', c.perSecond, 'alternative')),
    ...run.lockFree.map((c) => bar(c.label.replace(/^lock-free · /, ''), c.perSecond, 'lock-free baseline')),
    ...run.soldOut.map((c) => bar(`${c.label.split(' · ')[0]}: 409 answers`, c.perSecond, 'product')),
  ];
  if (comparisons.length > 1) {
    const x = quantitative('perSecond', { title: 'answers / s' });
    charts.push([
      'baselines',
      'The product against the HTTP ceiling and lock-free baselines',
      {
        ...title('Answers per second, real critical section', 'same machine, same run'),
        data: { values: comparisons },
        mark: 'bar',
        encoding: { y: nominal('label', labels), x, color: nominal('kind', { legend: { orient: 'bottom' } }) },
      },
    ]);
  }
  const first = run.oversell[0];
  if (first) {
    const guards = ['no shared lock', 'lock shared by every caller'];
    const colours = {
      scale: { range: ['#d62728', '#2ca02c'], domain: guards },
      legend: { orient: 'bottom', labelLimit: 320 },
    };
    const oversold = run.oversell.map((c) => ({
      label: c.label.replace(/^oversell · /, ''),
      oversold: c.books.oversold,
      guard: guards[Number(expectedSafe(c))],
    }));
    charts.push([
      'oversell',
      'Units oversold in the oversell demonstration',
      {
        ...title('Units oversold', `stock ${first.stock}, ${first.requests} one-unit orders at once`),
        data: { values: oversold },
        encoding: {
          y: nominal('label', labels),
          x: quantitative('oversold', { title: 'units sold beyond the stock' }),
        },
        layer: [
          { mark: 'bar', encoding: { color: nominal('guard', colours) } },
          { mark: { type: 'text', align: 'left', dx: 4 }, encoding: { text: quantitative('oversold') } },
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
