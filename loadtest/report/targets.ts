import type { RunResults } from '../results.js';
import { HEADLINE_SEGMENTS } from '../scenarios/run-all.js';
import { RunFigures } from './figures.js';
import { int, ms, num, pct, times } from './format.js';

export interface TargetResult {
  id: string;
  target: string;
  measured: string;
  /** null: the run did not measure it (scenario skipped or segment count not in the run). */
  met: boolean | null;
}

const RSS_LIMIT_BYTES = 250 * 2 ** 20;
const GROWTH_TARGET_ROWS = 2_000_000;
const GROWTH_P50_MS = 20;

/** The speed targets, judged on ratios measured within this run. */
export function evaluateTargets(run: RunResults): TargetResult[] {
  const f = new RunFigures(run);
  const out: TargetResult[] = [];
  const n = HEADLINE_SEGMENTS;

  const alternative = f.alternative;
  for (const [id, segments, factor, aim] of [
    ['alternative-headline', n, 1.5, ' (aim ×2)'],
    ['alternative-single', 1, 1.2, ''],
  ] as const) {
    const c = f.at('real', segments);
    out.push({
      id,
      target: `real critical section: ${segments === 1 ? 'single lock' : `${segments} segments`} ≥ ${factor} × the alternative${aim}`,
      measured:
        c && alternative
          ? `${int(c.ordersPerSecond)}/s vs ${int(alternative.ordersPerSecond)}/s: ${times(f.overAlternative(c))}`
          : 'not measured',
      met: c && alternative ? f.overAlternative(c) >= factor : null,
    });
  }

  // Issue 17's ratios: spread and mixed traffic against the alternative on the same traffic, the hot SKU against the
  // bare express echo.
  for (const [traffic, factor, aim] of [
    ['spread', 0.8, ' (aim ×1.0)'],
    ['mixed', 1.0, ''],
  ] as const) {
    const c = f.traffic(traffic);
    const alt = c && f.alternativeFor(c);
    const p99 = c && alt ? c.measured.latencyMs.p99 <= alt.measured.latencyMs.p99 : true;
    out.push({
      id: `alternative-${traffic}`,
      target: `${traffic} traffic: the product ≥ ${factor} × the alternative${aim}${traffic === 'spread' ? ', p99 no worse' : ''}`,
      measured:
        c && alt
          ? `${int(c.ordersPerSecond)}/s vs ${int(alt.ordersPerSecond)}/s: ${times(f.overAlternative(c))}; ` +
            `p99 ${ms(c.measured.latencyMs.p99)} vs ${ms(alt.measured.latencyMs.p99)} ms`
          : 'not measured',
      met: c && alt ? f.overAlternative(c) >= factor && (traffic === 'mixed' || p99) : null,
    });
  }
  const hot = f.at('real', n);
  out.push({
    id: 'hot-vs-bare-echo',
    target: `real critical section: ${n} segments ≥ 0.55 × the bare express echo`,
    measured:
      hot && Number.isFinite(f.bareEcho)
        ? `${int(hot.ordersPerSecond)}/s vs ${int(f.bareEcho)}/s: ${times(hot.ordersPerSecond / f.bareEcho)}`
        : 'not measured',
    met: hot && Number.isFinite(f.bareEcho) ? hot.ordersPerSecond >= 0.55 * f.bareEcho : null,
  });

  const stepSingle = f.singleLock('business-step');
  const stepHeadline = f.headline('business-step');
  const stepMs = run.meta.settings.businessStepMs;
  out.push({
    id: 'step-headline',
    target: `${stepMs} ms step: ${n} segments ≥ 0.95 × ${n} × single lock`,
    measured:
      stepSingle && stepHeadline
        ? `${int(stepHeadline.ordersPerSecond)}/s vs ${int(stepSingle.ordersPerSecond)}/s: ${times(f.speedup(stepHeadline))} (needs ×${num(0.95 * n, 1)})`
        : 'not measured',
    met: stepSingle && stepHeadline ? f.speedup(stepHeadline) >= 0.95 * n : null,
  });

  const stepCases = f.profile('business-step').filter((c) => c.segments > 1 && c.segments <= 32);
  const shortfalls = stepCases.filter((c) => f.speedup(c) < 0.9 * c.segments);
  out.push({
    id: 'step-scaling',
    target: `${stepMs} ms step: speed-up ≥ 0.9 × N for every N ≤ 32`,
    measured: stepCases.length
      ? stepCases
          .map((c) => `N=${c.segments} ${times(f.speedup(c))} (${pct(f.speedup(c) / c.segments)} of N)`)
          .join('; ')
      : 'not measured',
    met: stepCases.length && stepSingle ? shortfalls.length === 0 : null,
  });

  const realHeadline = f.headline('real');
  out.push({
    id: 'real-vs-ceiling',
    target: `real critical section: ${n} segments ≥ 60 % of the HTTP ceiling`,
    measured:
      realHeadline && Number.isFinite(f.ceiling)
        ? `${int(realHeadline.ordersPerSecond)}/s of ${int(f.ceiling)}/s = ${pct(realHeadline.ordersPerSecond / f.ceiling)}` +
          cpuView(f, f.serviceMsPerAnswer(realHeadline.ordersPerSecond, realHeadline.cpu))
        : 'not measured',
    met: realHeadline && Number.isFinite(f.ceiling) ? realHeadline.ordersPerSecond >= 0.6 * f.ceiling : null,
  });

  const realSingle = f.singleLock('real');
  out.push({
    id: 'single-lock-utilisation',
    target: 'real critical section, single lock: utilisation (acquisitions/s × mean hold) ≥ 0.8',
    measured: realSingle?.lock
      ? `${num(realSingle.lock.lockUtilisation)} (${num(realSingle.lock.acquisitionsPerSecond, 0)} acquisitions/s × ${ms(realSingle.lock.meanHoldMs)} ms hold)`
      : 'not measured',
    met: realSingle?.lock ? realSingle.lock.lockUtilisation >= 0.8 : null,
  });

  for (const single of [realSingle, stepSingle]) {
    if (!single?.lock) continue;
    const bound = f.fairnessBoundMs(single);
    const refused = single.measured.statusCounts[503] ?? 0;
    out.push({
      id: `fairness-${single.profile}`,
      target: `${single.label}: no order waits > 1.5 × ${single.connections} waiters × hold; no starvation (503)`,
      measured: `max ${ms(single.measured.latencyMs.max)} ms vs bound ${ms(bound)} ms (p99 ${ms(single.measured.latencyMs.p99)} ms); ${int(refused)} × 503`,
      met: single.measured.latencyMs.max <= bound && refused === 0,
    });
  }

  const soldOut = run.soldOut[0];
  out.push({
    id: 'sold-out',
    target: 'after sell-out: ≥ 90 % of the HTTP ceiling, no lock taken; a restock re-opens sales at once',
    measured: soldOut
      ? `${int(soldOut.refusalsPerSecond)} × 409/s = ${pct(soldOut.refusalsPerSecond / f.ceiling)} of the ceiling; ` +
        `${num(soldOut.lockAttemptsPerRequest ?? NaN, 3)} lock attempts per request; first order after restock: ` +
        `${soldOut.restock.firstOrderStatus} in ${ms(soldOut.restock.firstOrderMs)} ms` +
        cpuView(f, f.serviceMsPerAnswer(soldOut.refusalsPerSecond, soldOut.cpu))
      : 'not measured',
    met: soldOut
      ? soldOut.refusalsPerSecond >= 0.9 * f.ceiling &&
        soldOut.restock.firstOrderStatus === 201 &&
        (soldOut.lockAttemptsPerRequest ?? 0) === 0
      : null,
  });

  const holdBound = 1.1 * stepMs + 2;
  const stepHolds = f.allOf('business-step').filter((c) => c.lock && (c.segments === 1 || c.segments === n));
  out.push({
    id: 'step-hold',
    target: `${stepMs} ms step: mean lock hold ≤ 1.1 × step + 2 ms (${ms(holdBound)} ms)`,
    measured: stepHolds.length
      ? stepHolds.map((c) => `${c.label}: ${ms(c.lock!.meanHoldMs)} ms`).join('; ')
      : 'not measured',
    met: stepHolds.length ? stepHolds.every((c) => c.lock!.meanHoldMs <= holdBound) : null,
  });

  const grown = run.growth
    .filter((c) => c.ledgerRows >= GROWTH_TARGET_ROWS)
    .sort((a, b) => b.ledgerRows - a.ledgerRows)[0];
  const empty = run.growth.find((c) => c.ledgerRows === 0);
  out.push({
    id: 'growth',
    target: `GET /skus/:sku p50 ≤ ${GROWTH_P50_MS} ms with ≥ ${int(GROWTH_TARGET_ROWS)} ledger rows for the SKU`,
    measured: grown
      ? `${ms(grown.skuRead.latencyMs.p50)} ms with ${int(grown.ledgerRows)} rows` +
        (empty ? ` (${ms(empty.skuRead.latencyMs.p50)} ms with an empty ledger)` : '')
      : 'not measured',
    met: grown ? grown.skuRead.latencyMs.p50 <= GROWTH_P50_MS : null,
  });

  const memory = run.memory[0];
  out.push({
    id: 'rss',
    target: `RSS of a service instance ≤ 250 MiB at ${run.meta.settings.memoryConnections} connections`,
    measured: memory?.memory
      ? `${(memory.memory.maxRssBytes / 2 ** 20).toFixed(0)} MiB during the round, peak ${(memory.memory.peakRssBytes / 2 ** 20).toFixed(0)} MiB since start`
      : 'not measured',
    met: memory?.memory ? memory.memory.peakRssBytes <= RSS_LIMIT_BYTES : null,
  });

  const locked = [...run.segments, ...run.cluster, ...run.memory, ...run.alternative, ...(run.spread ?? [])];
  const badBooks = locked.filter((c) => !c.books.ok || !c.warmupBooks.ok);
  out.push({
    id: 'books',
    target:
      'books exact in every case of the product and of the alternative (sold = Σ 201, no negative stock, available + sold = stock)',
    measured: locked.length
      ? `${locked.length - badBooks.length} of ${locked.length} cases balanced${badBooks.length ? `; failed: ${badBooks.map((c) => c.label).join(', ')}` : ''}`
      : 'not measured',
    met: locked.length ? badBooks.length === 0 : null,
  });

  const unguarded = run.oversell.filter((c) => !expectedSafe(c));
  const guarded = run.oversell.filter(expectedSafe);
  out.push({
    id: 'oversell',
    target: 'oversell demonstration: > 0 oversold without a shared lock, 0 with the Redis lock',
    measured: run.oversell.length
      ? run.oversell.map((c) => `${c.label.replace(/^oversell · /, '')}: ${int(c.books.oversold)}`).join('; ')
      : 'not measured',
    met: run.oversell.length
      ? unguarded.every((c) => c.books.oversold > 0) && guarded.every((c) => c.books.ok && c.books.oversold === 0)
      : null,
  });
  return out;
}

/** The same comparison by service CPU per answer, which other load on the machine disturbs far less than rates. */
function cpuView(f: RunFigures, serviceMs: number): string {
  const echo = f.ceilingServiceMsPerAnswer;
  if (!Number.isFinite(serviceMs) || !Number.isFinite(echo)) return '';
  return `; by service CPU: ${ms(serviceMs)} ms per answer vs ${ms(echo)} ms per echo (${pct(echo / serviceMs)} of the ceiling’s efficiency)`;
}

/** Cases that must not oversell: the Redis lock anywhere, a local mutex inside one process. */
export function expectedSafe(c: { guard: string; instances: number }): boolean {
  return c.guard === 'redis-lock' || (c.guard === 'local-mutex' && c.instances === 1);
}
