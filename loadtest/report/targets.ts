import { casesWithBooks, HEADLINE_SEGMENTS as n } from '../scenarios/plan.js';
import type { LockCell } from '../scenarios/locks.js';
import type { SalesCase } from '../scenarios/sales.js';
import { type Answers, expectedSafe, int, isOurs, median, mib, ms, num, pct, type RunFigures } from './figures.js';
import { msPerAnswer, oversellName, times } from './figures.js';

/**
 * A target's figures in this run, formatted, and whether it was met; none when the run did not measure it. The
 * template's Targets table words each one (`{{name.figure}}`, `{{name.result}}`).
 */
type Target = { met: boolean } & Record<string, string | number | boolean>;

/** Targets a quick run judges: its correctness, which a short run shows as well as a long one, not its ratios. */
export const JUDGED_WHEN_QUICK = new Set(['books', 'oversell', 'drop-order']);

/** Each target this run measured, by name: its figures and whether it was met. */
export function judgeTargets(f: RunFigures): Record<string, Target> {
  const { run } = f;
  const rate = (c: Answers) => int(c.perSecond);
  const list = <T>(rounds: T[], show: (c: T) => string) => rounds.map(show).join(', ');
  // Issue 17's ratios: the product against the alternative on the same traffic, in the same round, every round's too.
  const againstAlternative = (c: SalesCase | undefined, factor: number, rounds = c ? f.roundsOn(c.traffic) : []) => {
    const alternative = c && f.alternativeFor(c);
    if (!c || !alternative) return undefined;
    const ratio = f.overAlternative(c);
    const all = list(rounds.includes(c) ? rounds : [c], (x) => times(f.overAlternative(x)));
    return { ours: rate(c), theirs: rate(alternative), ratio: times(ratio), rounds: all, met: ratio >= factor };
  };
  const onTraffic = (traffic: 'spread' | 'mixed', factor: number) => {
    const c = f.traffic(traffic);
    const against = againstAlternative(c, factor);
    if (!c || !against) return undefined;
    const [p99, p99Alternative] = [c.measured.latencyMs.p99, f.alternativeFor(c)!.measured.latencyMs.p99];
    const met = against.met && (traffic === 'mixed' || p99 <= p99Alternative);
    return { ...against, p99: ms(p99), p99Alternative: ms(p99Alternative), met };
  };
  // The fairness bound for a single lock: 1.5 × concurrent waiters × mean hold time.
  const fairness = (c: SalesCase | undefined) => {
    if (!c?.lock) return undefined;
    const bound = 1.5 * c.connections * c.lock.meanHoldMs;
    const refused = c.measured.statusCounts[503] ?? 0;
    const { max, p99 } = c.measured.latencyMs;
    return { max: ms(max), bound: ms(bound), p99: ms(p99), refused: int(refused), met: max <= bound && !refused };
  };
  const refusals = (why: string) => {
    const c = f.refusals.find((x) => x.why === why);
    if (!c) return undefined;
    const rounds = run.soldOut.filter((x) => x.why === why);
    const reopened = rounds.every((x) => x.reopen.firstOrderStatus === 201 && !x.lockAttemptsPerRequest);
    const share = f.refusalShare(c);
    return {
      ...{ refused: rate(c), echo: int(c.echoBeside.perSecond), share: pct(share) },
      ...{ rounds: list(rounds, (x) => pct(f.refusalShare(x))), attempts: num(c.lockAttemptsPerRequest ?? NaN, 3) },
      ...{ reopen: c.reopen.how, status: c.reopen.firstOrderStatus, reopenMs: ms(c.reopen.firstOrderMs) },
      met: share >= 0.9 && reopened,
    };
  };
  // The rate with `on` against the rate with `base` in the same round: the median round's share.
  const events = (on: string, base = 'off', bound = 0.9) => {
    const off = (c: SalesCase) => run.events.find((x) => x.events === base && x.round === c.round);
    const share = (c: SalesCase) => c.perSecond / (off(c)?.perSecond ?? NaN);
    const rounds = run.events.filter((x) => x.events === on && off(x));
    const c = median(rounds, share);
    if (!c) return undefined;
    const figures = {
      on: rate(c),
      off: rate(off(c)!),
      share: pct(share(c)),
      rounds: list(rounds, (x) => pct(share(x))),
    };
    return { ...figures, met: share(c) >= bound };
  };
  const { hot, hotOverEcho } = f;
  const echoOf = hotOverEcho && f.echoFor(hotOverEcho);
  const [stepSingle, stepHeadline] = [f.at('business-step', 1), f.at('business-step')];
  const steps = f.sweep('business-step').filter((c) => c.segments > 1 && c.segments <= 32);
  const single = f.at('real', 1)?.lock;
  const holdBound = 1.1 * run.meta.settings.businessStepMs + 2;
  const holds = f.allOf('business-step').filter((c) => c.lock && (c.segments === 1 || c.segments === n));
  const grown = run.growth.filter((c) => c.ledgerRows >= 2_000_000).sort((a, b) => b.ledgerRows - a.ledgerRows)[0];
  const empty = run.growth.find((c) => c.ledgerRows === 0);
  const memory = run.memory[0]?.memory;
  const locked = casesWithBooks(run);
  const bad = locked.filter((c) => !c.books.ok || !c.warmupBooks.ok);
  const safe = (c: (typeof run.oversell)[number]) =>
    expectedSafe(c) ? c.books.ok && c.books.oversold === 0 : c.books.oversold > 0;
  const ownMs = hot ? msPerAnswer(hot) : NaN;
  const drop = run.drop[0];
  const failed = (checks = {}) => Object.entries(checks).flatMap(([name, ok]) => (ok ? [] : [name]));

  const judged: Record<string, Target | undefined | null | 0 | false> = {
    alternative: againstAlternative(f.hotBeside ?? f.at('real'), 1.5),
    'alternative-single': againstAlternative(f.at('real', 1), 1.2),
    spread: onTraffic('spread', 0.8),
    mixed: onTraffic('mixed', 1.0),
    echo: hotOverEcho &&
      echoOf && {
        ...{ ours: rate(hotOverEcho), echo: rate(echoOf), ratio: times(f.overEcho(hotOverEcho)) },
        rounds: list(f.roundsOn(), (x) => times(f.overEcho(x))),
        met: f.overEcho(hotOverEcho) >= 0.55,
      },
    step: stepSingle &&
      stepHeadline && {
        ...{ ours: rate(stepHeadline), single: rate(stepSingle), ratio: times(f.speedup(stepHeadline)) },
        met: f.speedup(stepHeadline) >= 0.95 * n,
      },
    'step-sweep': stepSingle &&
      steps.length > 0 && {
        speedups: list(steps, (c) => `N=${c.segments} ${times(f.speedup(c))}`),
        met: steps.every((c) => f.speedup(c) >= 0.9 * c.segments),
      },
    ceiling: hot &&
      Number.isFinite(f.ceiling) && {
        ...{ ours: rate(hot), ceiling: int(f.ceiling), share: pct(hot.perSecond / f.ceiling) },
        ...{ serviceMs: ms(ownMs), echoMs: ms(f.ceilingServiceMs) },
        met: hot.perSecond >= 0.6 * f.ceiling,
      },
    utilisation: single && {
      utilisation: num(single.lockUtilisation),
      acquisitions: num(single.acquisitionsPerSecond, 0),
      holdMs: ms(single.meanHoldMs),
      met: single.lockUtilisation >= 0.8,
    },
    'fair-real': fairness(f.at('real', 1)),
    'fair-step': fairness(stepSingle),
    'sold-out': refusals('sold-out'),
    'not-on-sale': refusals('not-on-sale'),
    'events-on': events('on'),
    'events-webhook': events('webhook'),
    audit: events('on', 'audit-off', 0.97),
    hold: holds.length > 0 && {
      bound: ms(holdBound),
      holds: list(holds, (c) => `${c.label} ${ms(c.lock!.meanHoldMs)} ms`),
      met: holds.every((c) => c.lock!.meanHoldMs <= holdBound),
    },
    growth: grown && {
      ...{ p50: ms(grown.skuRead.latencyMs.p50), rows: int(grown.ledgerRows) },
      ...{ emptyP50: empty ? ms(empty.skuRead.latencyMs.p50) : '–', met: grown.skuRead.latencyMs.p50 <= 20 },
    },
    memory: memory && {
      ...{ rss: mib(memory.maxRssBytes), peak: mib(memory.peakRssBytes) },
      met: memory.peakRssBytes <= 250 * 2 ** 20,
    },
    books: locked.length > 0 && {
      ...{ balanced: int(locked.length - bad.length), cases: int(locked.length) },
      ...{ failed: list(bad, (c) => c.label) || 'none', met: bad.length === 0 },
    },
    oversell: run.oversell.length > 0 && {
      oversold: list(run.oversell, (c) => `${oversellName(c)} ${int(c.books.oversold)}`),
      met: run.oversell.every(safe),
    },
    drop: drop && {
      ...{ joins: int(drop.perSecond), echo: rate(drop.echo), ratio: times(drop.perSecond / drop.echo.perSecond) },
      p99: ms(drop.measured.latencyMs.p99),
      statuses: list(Object.entries(drop.measured.statusCounts), ([code, n]) => `${code}: ${int(n)}`),
      met: drop.perSecond >= 0.5 * drop.echo.perSecond,
    },
    'drop-order': drop && {
      ...{ customers: int(drop.customers), tickets: int(drop.tickets), preLine: int(drop.preLine) },
      ...{ soldOutMs: ms(drop.soldOutMs), reads: int(drop.reads.ratePerSecond[200] ?? 0) },
      ...{ readP99: ms(drop.reads.latencyMs.p99), failed: failed(drop.checks).join(', ') || 'none' },
      met: drop.soldOutMs <= 1000 && !failed(drop.checks).length,
    },
    ...lockTargets(f),
  };
  return Object.fromEntries(Object.entries(judged).filter((entry): entry is [string, Target] => Boolean(entry[1])));
}

/** The lock benchmark's targets: throughput against the better peer, K keys kept busy, the fair mode's longest wait. */
function lockTargets({ lockCell: cell, fastest }: RunFigures) {
  const [ours, peer] = [fastest(cell(1, 0), true), fastest(cell(1, 0), false)];
  const fair = cell(1, 20).find((r) => r.contender === 'this-lock-fair');
  const ratio = ours && peer ? ours.sectionsPerSecond / peer.sectionsPerSecond : NaN;
  const keysBusy = (r: LockCell) => ({
    ...{ rate: int(r.sectionsPerSecond), holdMs: ms(r.meanHoldMs), ceiling: int(20_000 / r.meanHoldMs) },
    met: r.sectionsPerSecond >= 950,
  });
  const ourCells = cell(20, 20).filter((r) => isOurs(r.contender));
  const peers = ours &&
    peer && {
      ...{ ours: ours.contender, ourRate: int(ours.sectionsPerSecond), peer: peer.contender },
      ...{ peerRate: int(peer.sectionsPerSecond), ratio: times(ratio), met: ratio >= 1.5 },
    };
  return {
    'lock-peer': peers,
    ...Object.fromEntries(ourCells.map((r) => [`keys-busy:${r.contender}`, keysBusy(r)])),
    'lock-fair': fair && { maxWait: int(fair.maxWaitMs), met: fair.maxWaitMs <= 1.5 * fair.workers * 20 },
  };
}
