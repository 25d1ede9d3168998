import type { RunResults } from '../run-results.js';
import { casesWithBooks, HEADLINE_SEGMENTS as n } from '../scenarios/plan.js';
import type { SalesCase } from '../scenarios/sales.js';
import {
  expectedSafe,
  int,
  isOurs,
  mib,
  ms,
  num,
  pct,
  type RunFigures,
  serviceMsPerAnswer,
  table,
  times,
} from './figures.js';

/** A target: what it asks, what the run measured (falsy: not measured in this run), and whether it was met. */
type Target = [target: string, measured: string | number | false | null | undefined, met: unknown];

/** The speed targets, judged on ratios measured within this run, as the report's table. */
export function targetsTable(f: RunFigures): string | undefined {
  const { run } = f;
  const { businessStepMs: stepMs, memoryConnections } = run.meta.settings;
  const vs = (c: SalesCase, other: SalesCase) =>
    `${int(c.ordersPerSecond)}/s vs ${int(other.ordersPerSecond)}/s: ${times(c.ordersPerSecond / other.ordersPerSecond)}`;
  // The same comparison by service CPU per answer, which other load on the machine disturbs far less than rates.
  const cpuView = (perSecond: number, cpu: SalesCase['cpu']) => {
    const [own, echo] = [serviceMsPerAnswer(perSecond, cpu), f.ceilingServiceMs];
    return Number.isFinite(own) && Number.isFinite(echo)
      ? `; by service CPU: ${ms(own)} ms per answer vs ${ms(echo)} ms per echo (${pct(echo / own)} of the ceiling’s efficiency)`
      : '';
  };
  const alternative = f.alternativeFor({});
  const againstAlternative = (segments: number, factor: number, aim: string): Target => {
    const c = f.at('real', segments);
    const name = segments === 1 ? 'single lock' : `${segments} segments`;
    return [
      `real critical section: ${name} ≥ ${factor} × the alternative${aim}`,
      c && alternative && vs(c, alternative),
      c && alternative && f.overAlternative(c) >= factor,
    ];
  };
  // Issue 17's ratios: spread and mixed traffic against the alternative on the same traffic.
  const onTraffic = (traffic: 'spread' | 'mixed', factor: number, aim: string): Target => {
    const c = f.traffic(traffic);
    const alt = c && f.alternativeFor(c);
    const p99 = (x: SalesCase) => x.measured.latencyMs.p99;
    return [
      `${traffic} traffic: the product ≥ ${factor} × the alternative${aim}`,
      c && alt && `${vs(c, alt)}; p99 ${ms(p99(c))} vs ${ms(p99(alt))} ms`,
      c && alt && f.overAlternative(c) >= factor && (traffic === 'mixed' || p99(c) <= p99(alt)),
    ];
  };
  const hot = f.at('real');
  const echo = f.bareEcho;
  const [stepSingle, stepHeadline] = [f.at('business-step', 1), f.at('business-step')];
  const steps = f.profile('business-step').filter((c) => c.segments > 1 && c.segments <= 32);
  const single = f.at('real', 1)?.lock;
  // The fairness bound for a single lock: 1.5 × concurrent waiters × mean hold time.
  const fairness = [f.at('real', 1), stepSingle].flatMap((c): Target[] => {
    if (!c?.lock) return [];
    const bound = 1.5 * c.connections * c.lock.meanHoldMs;
    const refused = c.measured.statusCounts[503] ?? 0;
    const { max, p99 } = c.measured.latencyMs;
    return [
      [
        `${c.label}: no order waits > 1.5 × ${c.connections} waiters × hold; no starvation (503)`,
        `max ${ms(max)} ms vs bound ${ms(bound)} ms (p99 ${ms(p99)} ms); ${int(refused)} × 503`,
        max <= bound && refused === 0,
      ],
    ];
  });
  const refusals = (why: string, target: string): Target => {
    const c = run.soldOut.find((x) => x.why === why);
    const r = c?.reopen;
    return [
      target,
      c &&
        `${int(c.refusalsPerSecond)} × 409/s = ${pct(c.refusalsPerSecond / f.ceiling)} of the ceiling; ${num(c.lockAttemptsPerRequest ?? NaN, 3)} lock attempts per request; first order after ${r!.how}: ${r!.firstOrderStatus} in ${ms(r!.firstOrderMs)} ms${cpuView(c.refusalsPerSecond, c.cpu)}`,
      c && c.refusalsPerSecond >= 0.9 * f.ceiling && r!.firstOrderStatus === 201 && !c.lockAttemptsPerRequest,
    ];
  };
  const eventsOff = run.events.find((c) => c.events === 'off');
  const events = run.events
    .filter((x) => x.events !== 'off')
    .map((c): Target => {
      const share = eventsOff ? c.ordersPerSecond / eventsOff.ordersPerSecond : NaN;
      return [
        `hot SKU with ${c.label.split(' · ').at(-1)}: ≥ 90 % of the rate with events off`,
        eventsOff && `${int(c.ordersPerSecond)} vs ${int(eventsOff.ordersPerSecond)} orders/s = ${pct(share)}`,
        share >= 0.9,
      ];
    });
  const holdBound = 1.1 * stepMs + 2;
  const holds = f.allOf('business-step').filter((c) => c.lock && (c.segments === 1 || c.segments === n));
  const grown = run.growth.filter((c) => c.ledgerRows >= 2_000_000).sort((a, b) => b.ledgerRows - a.ledgerRows)[0];
  const empty = run.growth.find((c) => c.ledgerRows === 0);
  const memory = run.memory[0]?.memory;
  const locked = casesWithBooks(run);
  const bad = locked.filter((c) => !c.books.ok || !c.warmupBooks.ok);
  const safe = (c: RunResults['oversell'][number]) =>
    expectedSafe(c) ? c.books.ok && c.books.oversold === 0 : c.books.oversold > 0;

  const targets: Target[] = [
    againstAlternative(n, 1.5, ' (aim ×2)'),
    againstAlternative(1, 1.2, ''),
    onTraffic('spread', 0.8, ' (aim ×1.0), p99 no worse'),
    onTraffic('mixed', 1.0, ''),
    [
      `real critical section: ${n} segments ≥ 0.55 × the bare express echo`,
      hot && echo && `${int(hot.ordersPerSecond)}/s vs ${int(echo)}/s: ${times(hot.ordersPerSecond / echo)}`,
      hot && echo ? hot.ordersPerSecond >= 0.55 * echo : null,
    ],
    [
      `${stepMs} ms step: ${n} segments ≥ 0.95 × ${n} × single lock`,
      stepSingle && stepHeadline && `${vs(stepHeadline, stepSingle)} (needs ×${num(0.95 * n, 1)})`,
      stepSingle && stepHeadline && f.speedup(stepHeadline) >= 0.95 * n,
    ],
    [
      `${stepMs} ms step: speed-up ≥ 0.9 × N for every N ≤ 32`,
      steps.map((c) => `N=${c.segments} ${times(f.speedup(c))} (${pct(f.speedup(c) / c.segments)} of N)`).join('; '),
      steps.length && stepSingle ? steps.every((c) => f.speedup(c) >= 0.9 * c.segments) : null,
    ],
    [
      `real critical section: ${n} segments ≥ 60 % of the HTTP ceiling`,
      hot &&
        `${int(hot.ordersPerSecond)}/s of ${int(f.ceiling)}/s = ${pct(hot.ordersPerSecond / f.ceiling)}${cpuView(hot.ordersPerSecond, hot.cpu)}`,
      hot && f.ceiling ? hot.ordersPerSecond >= 0.6 * f.ceiling : null,
    ],
    [
      'real critical section, single lock: utilisation (acquisitions/s × mean hold) ≥ 0.8',
      single &&
        `${num(single.lockUtilisation)} (${num(single.acquisitionsPerSecond, 0)} acquisitions/s × ${ms(single.meanHoldMs)} ms hold)`,
      single && single.lockUtilisation >= 0.8,
    ],
    ...fairness,
    refusals('sold-out', 'after sell-out: ≥ 90 % of the HTTP ceiling, no lock taken; a restock re-opens sales at once'),
    refusals(
      'not-on-sale',
      'before a sale window opens: ≥ 90 % of the HTTP ceiling, no lock taken; the opening sells at once',
    ),
    ...events,
    [
      `${stepMs} ms step: mean lock hold ≤ 1.1 × step + 2 ms (${ms(holdBound)} ms)`,
      holds.map((c) => `${c.label}: ${ms(c.lock!.meanHoldMs)} ms`).join('; '),
      holds.length ? holds.every((c) => c.lock!.meanHoldMs <= holdBound) : null,
    ],
    [
      `GET /skus/:sku p50 ≤ 20 ms with ≥ ${int(2_000_000)} ledger rows for the SKU`,
      grown &&
        `${ms(grown.skuRead.latencyMs.p50)} ms with ${int(grown.ledgerRows)} rows${empty ? ` (${ms(empty.skuRead.latencyMs.p50)} ms with an empty ledger)` : ''}`,
      grown && grown.skuRead.latencyMs.p50 <= 20,
    ],
    [
      `RSS of a service instance ≤ 250 MiB at ${memoryConnections} connections`,
      memory && `${mib(memory.maxRssBytes)} MiB during the round, peak ${mib(memory.peakRssBytes)} MiB since start`,
      memory && memory.peakRssBytes <= 250 * 2 ** 20,
    ],
    [
      'books exact in every case of the product and of the alternative (sold = Σ 201, no negative stock, available + sold = stock)',
      locked.length &&
        `${locked.length - bad.length} of ${locked.length} cases balanced${bad.length ? `; failed: ${bad.map((c) => c.label).join(', ')}` : ''}`,
      bad.length === 0,
    ],
    [
      'oversell demonstration: > 0 oversold without a shared lock, 0 with the Redis lock',
      run.oversell.map((c) => `${c.label.replace(/^oversell · /, '')}: ${int(c.books.oversold)}`).join('; '),
      run.oversell.every(safe),
    ],
    ...lockTargets(run),
  ];
  const mark = (ok: boolean | null) => (ok === null ? 'not measured' : ok ? '**met**' : '**not met**');
  return table(
    targets,
    [
      ['Target', (t) => t[0]],
      ['Measured', (t) => t[1] || 'not measured'],
      ['Result', (t) => mark(t[1] ? Boolean(t[2]) : null)],
    ],
    'l',
  );
}

/** The lock benchmark's targets: throughput against the better peer, K keys kept busy, the fair mode's longest wait. */
function lockTargets(run: RunResults): Target[] {
  const cell = (keys: number, holdMs: number) => run.locks.filter((r) => r.keys === keys && r.holdMs === holdMs);
  const best = (cells: typeof run.locks) => cells.sort((a, b) => b.sectionsPerSecond - a.sectionsPerSecond)[0];
  const ours = best(cell(1, 0).filter((r) => isOurs(r.contender)));
  const peer = best(cell(1, 0).filter((r) => !isOurs(r.contender)));
  const fair = cell(1, 20).find((r) => r.contender === 'this-lock-fair');
  const targets: Target[] = cell(20, 20)
    .filter((c) => isOurs(c.contender))
    .map((r) => [
      `lock alone, K=20, H=20 ms (${r.contender}): ≥ 0.95 of the ideal 1,000/s`,
      `${int(r.sectionsPerSecond)}/s (holds lasted ${ms(r.meanHoldMs)} ms: ceiling ${int(20_000 / r.meanHoldMs)}/s)`,
      r.sectionsPerSecond >= 950,
    ]);
  if (ours && peer)
    targets.unshift([
      'lock alone, K=1, H=0: ≥ 1.5 × the better peer',
      `${ours.contender} ${int(ours.sectionsPerSecond)}/s vs ${peer.contender} ${int(peer.sectionsPerSecond)}/s = ${times(ours.sectionsPerSecond / peer.sectionsPerSecond)}`,
      ours.sectionsPerSecond >= 1.5 * peer.sectionsPerSecond,
    ]);
  if (fair)
    targets.push([
      `lock alone, K=1, H=20 ms, fair: max wait ≤ 1.5 × ${fair.workers} × 20 ms`,
      `${int(fair.maxWaitMs)} ms`,
      fair.maxWaitMs <= 1.5 * fair.workers * 20,
    ]);
  return targets;
}
