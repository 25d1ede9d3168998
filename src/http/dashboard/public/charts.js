// The page's charts: the last hour of the fleet's per-second series (GET /dashboard/history), kept up to date by
// the snapshots' recent seconds, drawn with uPlot from its npm package. The SKU's timeline is marked on each chart.
import uPlot from '/dashboard/uplot/uPlot.esm.js';

export const REASONS = ['out_of_stock', 'not_on_sale', 'purchase_limit', 'lock_busy'];
const KEEP_SECONDS = 3600;
const MIN_SHOWN = 120;
/** Sampled, not counted: a second without a sample shows the last one before it. */
const HELD = new Set(['sku.available', 'sku.reserved', 'sku.sold']);

/** A series window's columns as flat keys: `sku.placed`, `fleet.refusals.lock_busy`, … */
function flatten(window) {
  const flat = {};
  for (const scope of ['fleet', 'sku']) {
    for (const [name, column] of Object.entries(window[scope])) {
      if (name === 'refusals') for (const reason of REASONS) flat[`${scope}.refusals.${reason}`] = column[reason];
      else flat[`${scope}.${name}`] = column;
    }
  }
  return flat;
}

/** The last hour, second by second; newer windows overwrite the seconds they cover (late counts arrive). */
export class SeriesStore {
  from = 0;
  length = 0;
  columns = {};

  reset(window) {
    this.from = window.from;
    this.length = window.seconds;
    this.columns = flatten(window);
  }

  merge(window) {
    if (this.length === 0) return this.reset(window);
    const end = window.from + window.seconds;
    const grow = end - (this.from + this.length);
    if (grow > 0) {
      for (const column of Object.values(this.columns)) column.push(...new Array(grow).fill(null));
      this.length += grow;
    }
    for (const [key, values] of Object.entries(flatten(window))) {
      const column = (this.columns[key] ??= new Array(this.length).fill(null));
      values.forEach((value, i) => {
        const at = window.from + i - this.from;
        if (at >= 0) column[at] = value;
      });
    }
    const drop = this.length - KEEP_SECONDS;
    if (drop > 0) {
      for (const column of Object.values(this.columns)) column.splice(0, drop);
      this.from += drop;
      this.length -= drop;
    }
  }

  seconds() {
    return Array.from({ length: this.length }, (_, i) => this.from + i);
  }

  /** Index of the first second anything was recorded in (the page starts its charts there): length if none. */
  firstRecorded() {
    let first = this.length;
    for (const column of Object.values(this.columns)) {
      const i = column.findIndex((value) => value !== null && value !== 0);
      if (i >= 0 && i < first) first = i;
    }
    return first;
  }

  column(key) {
    const column = this.columns[key] ?? new Array(this.length).fill(null);
    if (!HELD.has(key)) return column;
    let last = null;
    return column.map((value) => (value === null ? last : (last = value)));
  }

  /** Σ of a counted column over the whole window. */
  total(key) {
    return (this.columns[key] ?? []).reduce((sum, n) => sum + (n ?? 0), 0);
  }

  /** A column's value `ago` seconds before the newest second. */
  at(key, ago) {
    return this.columns[key]?.[this.length - 1 - ago] ?? null;
  }
}

const EVENT_COLOURS = { 'sku.sold_out': '#b3261e', 'sku.sale_opened': '#1b7f3b', 'sku.sale_closed': '#7a4b00' };

/** Dashed vertical lines at the timeline's events, labelled with their type. */
function timelinePlugin(events) {
  return {
    hooks: {
      draw: [
        (u) => {
          const { ctx } = u;
          const { top, height } = u.bbox;
          const [min, max] = [u.scales.x.min, u.scales.x.max];
          ctx.save();
          ctx.font = `${11 * devicePixelRatio}px system-ui, sans-serif`;
          ctx.setLineDash([4 * devicePixelRatio, 3 * devicePixelRatio]);
          events().forEach((event, i) => {
            const t = Date.parse(event.occurredAt) / 1000;
            if (t < min || t > max) return;
            const x = Math.round(u.valToPos(t, 'x', true));
            ctx.strokeStyle = ctx.fillStyle = EVENT_COLOURS[event.type] ?? '#6b4fbb';
            ctx.beginPath();
            ctx.moveTo(x, top);
            ctx.lineTo(x, top + height);
            ctx.stroke();
            // Staggered, so that events close in time keep readable labels.
            ctx.fillText(event.type.slice(4).replace('_', ' '), x + 3, top + (12 + 12 * (i % 3)) * devicePixelRatio);
          });
          ctx.restore();
        },
      ],
    },
  };
}

/** One chart: `series` are [key, label, colour, scale?]; redrawn from the store by `update()`. */
export class Chart {
  constructor(element, store, series, events, { units = '/s', secondScale } = {}) {
    this.store = store;
    this.keys = series.map(([key]) => key);
    const axes = [{}, { size: 60, label: units }];
    const scales = { x: { time: true } };
    if (secondScale) {
      axes.push({ side: 1, scale: secondScale.name, label: secondScale.label, grid: { show: false }, size: 60 });
      scales[secondScale.name] = { auto: true };
    }
    this.plot = new uPlot(
      {
        width: element.clientWidth || 600,
        height: 220,
        scales,
        axes,
        series: [
          {},
          ...series.map(([, label, stroke, scale]) => ({
            label,
            stroke,
            width: 1.5,
            scale: scale ?? 'y',
            spanGaps: true,
          })),
        ],
        plugins: [timelinePlugin(events)],
        legend: { live: false },
      },
      [[]],
      element,
    );
    addEventListener('resize', () => this.plot.setSize({ width: element.clientWidth, height: 220 }));
  }

  /** From the first second with data (at least the last MIN_SHOWN seconds), so that a young sale is not a sliver. */
  update() {
    const start = Math.max(0, Math.min(this.store.firstRecorded(), this.store.length - MIN_SHOWN));
    this.plot.setData([
      this.store.seconds().slice(start),
      ...this.keys.map((key) => this.store.column(key).slice(start)),
    ]);
  }
}
