import { casesWithBooks, HEADLINE_SEGMENTS as n } from '../scenarios/plan.js';
import type { LockCell } from '../scenarios/locks.js';
import type { SalesCase } from '../scenarios/sales.js';
import { type Answers, expectedSafe, isOurs, median, msPerAnswer, oversellName, type RunFigures } from './figures.js';

/**
 * A target's figures in this run and whether it was met; none when the run did not measure it. The template's Targets
 * table words and formats each one (`{{name.figure}}`, `{{name.result}}`).
 */
type Target = { met: boolean } & Record<string, unknown>;

/** Targets a quick run judges: its correctness, which a short run shows as well as a long one, not its ratios. */
export const JUDGED_WHEN_QUICK = new Set(['books', 'oversell', 'drop-order', 'expiry']);

export function judgeTargets(f: RunFigures): Record<string, Target> {
  const { run } = f;
  // The targets' ratios: the product against the alternative on the same traffic, or against the bare echo, in the same
  // round, every round's too; on spread traffic its p99 no worse either.
  const against = (yardstick: 'alternative' | 'echo', ours: SalesCase | undefined, factor: number) => {
    const theirs = ours && (yardstick === 'echo' ? f.echoFor(ours) : f.alternativeFor(ours));
    if (!ours || !theirs) return undefined;
    const over = yardstick === 'echo' ? f.overEcho : f.overAlternative;
    const rounds = f.roundsOn(ours.traffic);
    const ratio = over(ours);
    const everyRound = (rounds.includes(ours) ? rounds : [ours]).map(over);
    const p99 = (c: Answers) => c.measured.latencyMs.p99;
    const met = ratio >= factor && (ours.traffic !== 'spread' || p99(ours) <= p99(theirs));
    return { ours, theirs, ratio, rounds: everyRound, met };
  };
  const fairness = (c: SalesCase | undefined) => {
    if (!c?.lock) return undefined;
    const bound = 1.5 * c.connections * c.lock.meanHoldMs;
    const refused = c.measured.statusCounts[503] ?? 0;
    return { c, bound, refused, met: c.measured.latencyMs.max <= bound && !refused };
  };
  // Refusals against the product's own echo beside them; sold-out ones against the bare express echo of their round too.
  const refusals = (why: string, bareBound = 0) => {
    const c = f.refusals.find((x) => x.why === why);
    const rounds = run.soldOut.filter((x) => x.why === why);
    const reopened = rounds.every((x) => x.reopen.firstOrderStatus === 201 && !x.lockAttemptsPerRequest);
    const share = c && f.refusalShare(c);
    const bareShare = c && f.overEcho(c);
    return (
      c && {
        c,
        share,
        bareShare,
        rounds: rounds.map(f.refusalShare),
        met: share! >= 0.9 && (bareShare ?? NaN) >= bareBound && reopened,
      }
    );
  };
  // The rate with `on` against the rate with `base` in the same round: the median round's share.
  const events = (on: string, base = 'off', bound = 0.9) => {
    const off = (c: SalesCase) => run.events.find((x) => x.events === base && x.round === c.round);
    const share = (c: SalesCase) => c.perSecond / (off(c)?.perSecond ?? NaN);
    const rounds = run.events.filter((x) => x.events === on && off(x));
    const c = median(rounds, share);
    return c && { on: c, off: off(c), share: share(c), rounds: rounds.map(share), met: share(c) >= bound };
  };
  // What an order costs the service's CPU against what a bare echo's answer costs its own, in the same round.
  const cpuOverEcho = (c: SalesCase) => {
    const echo = f.echoFor(c);
    return echo ? msPerAnswer(c) / msPerAnswer(echo) : NaN;
  };
  const echoCpu = (ours: SalesCase | undefined) => {
    const echo = ours && f.echoFor(ours);
    if (!ours || !echo || !Number.isFinite(msPerAnswer(ours)) || !Number.isFinite(msPerAnswer(echo))) return undefined;
    const ratio = cpuOverEcho(ours);
    const rounds = f.roundsOn().map(cpuOverEcho);
    return { oursMs: msPerAnswer(ours), echoMs: msPerAnswer(echo), ratio, rounds, met: ratio <= 1.5 };
  };
  const { hot } = f;
  const stepSingle = f.at('business-step', 1);
  const stepHeadline = f.at('business-step');
  const steps = f.sweep('business-step').filter((c) => c.segments > 1 && c.segments <= 32);
  const single = f.at('real', 1)?.lock;
  const holdBound = 1.1 * run.meta.settings.businessStepMs + 2;
  const holds = f.allOf('business-step').filter((c) => c.lock && (c.segments === 1 || c.segments === n));
  const grown = run.growth.filter((c) => c.ledgerRows >= 2_000_000).sort((a, b) => b.ledgerRows - a.ledgerRows)[0];
  const memory = run.memory[0]?.memory;
  const locked = casesWithBooks(run);
  const failed = locked.filter((c) => !c.books.ok || !c.warmupBooks.ok);
  const safe = (c: (typeof run.oversell)[number]) =>
    expectedSafe(c) ? c.books.ok && c.books.oversold === 0 : c.books.oversold > 0;
  const drop = run.drop[0];
  const expiry = run.expiry[0];
  const failedChecks = Object.entries(drop?.checks ?? {}).flatMap(([name, ok]) => (ok ? [] : [name]));
  const { lockCell: cell, fastest } = f;
  const lockOurs = fastest(cell(1, 0), true);
  const lockPeer = fastest(cell(1, 0), false);
  const lockRatio = lockOurs && lockPeer ? lockOurs.sectionsPerSecond / lockPeer.sectionsPerSecond : NaN;
  const keysBusy = (r: LockCell) => ({ ...r, ceiling: 20_000 / r.meanHoldMs, met: r.sectionsPerSecond >= 950 });
  const ourCells = cell(20, 20).filter((r) => isOurs(r.contender));
  const fair = cell(1, 20).find((r) => r.contender === 'this-lock-fair');

  const judged: Record<string, Target | undefined | null | 0 | false> = {
    alternative: against('alternative', f.hotBeside ?? f.at('real'), 1.5),
    'alternative-single': against('alternative', f.at('real', 1), 1.2),
    spread: against('alternative', f.traffic('spread'), 1.2),
    mixed: against('alternative', f.traffic('mixed'), 1.0),
    echo: against('echo', f.hotOverEcho, 0.7),
    step: stepSingle &&
      stepHeadline && {
        ours: stepHeadline,
        single: stepSingle,
        ratio: f.speedup(stepHeadline),
        met: f.speedup(stepHeadline) >= 0.95 * n,
      },
    'step-sweep': stepSingle &&
      steps.length > 0 && {
        steps: steps.map((c) => ({ segments: c.segments, speedup: f.speedup(c) })),
        met: steps.every((c) => f.speedup(c) >= 0.9 * c.segments),
      },
    ceiling: hot &&
      Number.isFinite(f.ceiling) && {
        ours: hot,
        share: hot.perSecond / f.ceiling,
        serviceMs: msPerAnswer(hot),
        echoMs: f.ceilingServiceMs,
        met: hot.perSecond >= 0.6 * f.ceiling,
      },
    'echo-cpu': echoCpu(f.hotOverEcho),
    utilisation: single && { lock: single, met: single.lockUtilisation >= 0.8 },
    'fair-real': fairness(f.at('real', 1)),
    'fair-step': fairness(stepSingle),
    'sold-out': refusals('sold-out', 0.9),
    'not-on-sale': refusals('not-on-sale'),
    'events-on': events('on'),
    'events-webhook': events('webhook'),
    audit: events('on', 'audit-off', 0.97),
    hold: holds.length > 0 && { bound: holdBound, holds, met: holds.every((c) => c.lock!.meanHoldMs <= holdBound) },
    growth: grown && {
      grown,
      empty: run.growth.find((c) => c.ledgerRows === 0),
      met: grown.skuRead.latencyMs.p50 <= 20,
    },
    memory: memory && { ...memory, met: memory.peakRssBytes <= 250 * 2 ** 20 },
    books: locked.length > 0 && {
      balanced: locked.length - failed.length,
      cases: locked.length,
      failed,
      met: !failed.length,
    },
    oversell: run.oversell.length > 0 && {
      cases: run.oversell.map((c) => ({ name: oversellName(c), oversold: c.books.oversold })),
      met: run.oversell.every(safe),
    },
    drop: drop && {
      ...drop,
      ratio: drop.perSecond / drop.echo.perSecond,
      met: drop.perSecond >= 0.5 * drop.echo.perSecond,
    },
    expiry: expiry && { ...expiry, met: expiry.lagMs <= 2_000 && expiry.booksExact },
    'drop-order': drop && {
      ...drop,
      failed: failedChecks.join(', ') || 'none',
      met: drop.soldOutMs <= 1000 && !failedChecks.length,
    },
    // The lock alone: throughput against the better peer, K keys kept busy, the fair mode's longest wait.
    'lock-peer': lockOurs && lockPeer && { ours: lockOurs, peer: lockPeer, ratio: lockRatio, met: lockRatio >= 1.5 },
    ...Object.fromEntries(ourCells.map((r) => [`keys-busy:${r.contender}`, keysBusy(r)])),
    'lock-fair': fair && { ...fair, met: fair.maxWaitMs <= 1.5 * fair.workers * 20 },
  };
  return Object.fromEntries(Object.entries(judged).filter((entry): entry is [string, Target] => Boolean(entry[1])));
}
