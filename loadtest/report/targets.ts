import type { RunResults } from '../run-results.js';
import { casesWithBooks, HEADLINE_SEGMENTS as n } from '../scenarios/plan.js';
import type { LockCell } from '../scenarios/locks.js';
import type { SalesCase } from '../scenarios/sales.js';
import { type Answers, expectedSafe, int, isOurs, mib, ms, num, pct, type RunFigures } from './figures.js';
import { median, msPerAnswer, oversellName, times } from './figures.js';

/** What the run measured for a target (falsy: not measured in this run), and whether it was met. */
type Judged = [measured: string | number | false | null | undefined, met: unknown];

/** The targets' Measured and Result cells as the template's `target:<name>` slots, judged within this run. */
export function targetSlots(f: RunFigures): Record<string, string> {
  const { judged, holdBound } = judgeTargets(f);
  const cells = ([measured, met]: Judged) =>
    measured
      ? `${String(measured).replace(/\|/g, '\\|')} | ${met ? '**met**' : '**not met**'}`
      : 'not measured | not measured';
  // Backends measured alone (`--only lock-backends`) have no row of their own in the template.
  const backends = Object.entries(judged).filter(([name]) => name.startsWith('keys-busy:backend:'));
  const backendRow = ([name, result]: [string, Judged]) =>
    `| lock alone, K=20, H=20 ms (${name.slice('keys-busy:'.length)}): ≥ 0.95 of the ideal 1,000/s | ${cells(result)} |`;
  return {
    ...Object.fromEntries(Object.entries(judged).map(([name, result]) => [`target:${name}`, cells(result)])),
    holdBound: ms(holdBound),
    backendTargets: backends.map(backendRow).join('\n'),
  };
}

/** Targets a quick run judges: its correctness, which a short run shows as well as a long one, not its ratios. */
const JUDGED_WHEN_QUICK = new Set(['books', 'oversell']);

/**
 * The run's verdict for the console, one screen: how many targets were met, then each one not met with its figure. A
 * quick run is a smoke test: it judges only the books and the oversell demonstration.
 */
export function verdict(f: RunFigures): string[] {
  const quick = f.run.meta.mode === 'quick';
  const measured = Object.entries(judgeTargets(f).judged).filter(
    ([name, [figure]]) => figure && (!quick || JUDGED_WHEN_QUICK.has(name)),
  );
  const notMet = measured.filter(([, [, met]]) => !met);
  const lines = quick
    ? ['quick run: a smoke test, its rates and ratios are not judged (run without --quick for that)']
    : [];
  const met = `verdict: ${measured.length - notMet.length} of ${measured.length} targets measured met`;
  lines.push(notMet.length === 0 ? met : `${met}; not met:`);
  for (const [name, [figure]] of notMet) lines.push(`  ${name}: ${String(figure)}`);
  return lines;
}

/** Each target's figure in this run and whether it was met. */
function judgeTargets(f: RunFigures): { judged: Record<string, Judged>; holdBound: number } {
  const { run } = f;
  const stepMs = run.meta.settings.businessStepMs;
  const vs = (c: Answers, other: Answers) =>
    `${int(c.perSecond)}/s vs ${int(other.perSecond)}/s: ${times(c.perSecond / other.perSecond)}`;
  // The same comparison by service CPU per answer, which other load on the machine disturbs far less than rates.
  const cpuView = (c: Answers, echo = f.ceilingServiceMs) => {
    const own = msPerAnswer(c);
    if (!Number.isFinite(own) || !Number.isFinite(echo)) return '';
    return `; by service CPU: ${ms(own)} ms per answer vs ${ms(echo)} ms per echo (${pct(echo / own)} of the ceiling’s efficiency)`;
  };
  /** A comparison measured in rounds names every round's ratio beside its median one. */
  const ofRounds = <T>(rounds: T[], ratio: (c: T) => string) =>
    rounds.length > 1 ? `, the median of ${rounds.map(ratio).join(', ')}` : '';
  const hotRounds = f.roundsOn();
  const againstAlternative = (c: SalesCase | undefined, factor: number): Judged => {
    const alternative = c && f.alternativeFor(c);
    const rounds = c && hotRounds.includes(c) ? ofRounds(hotRounds, (x) => times(f.overAlternative(x))) : '';
    return [c && alternative && vs(c, alternative) + rounds, c && f.overAlternative(c) >= factor];
  };
  // Issue 17's ratios: spread and mixed traffic against the alternative on the same traffic, in the same round.
  const onTraffic = (traffic: 'spread' | 'mixed', factor: number): Judged => {
    const c = f.traffic(traffic);
    const alt = c && f.alternativeFor(c);
    const p99 = (x: SalesCase) => x.measured.latencyMs.p99;
    const rounds = ofRounds(f.roundsOn(traffic), (x) => times(f.overAlternative(x)));
    const measured = c && alt && `${vs(c, alt)}${rounds}; p99 ${ms(p99(c))} vs ${ms(p99(alt))} ms in that round`;
    return [measured, c && alt && f.overAlternative(c) >= factor && (traffic === 'mixed' || p99(c) <= p99(alt))];
  };
  // The fairness bound for a single lock: 1.5 × concurrent waiters × mean hold time.
  const fairness = (c: SalesCase | undefined): Judged => {
    if (!c?.lock) return [undefined, false];
    const bound = 1.5 * c.connections * c.lock.meanHoldMs;
    const refused = c.measured.statusCounts[503] ?? 0;
    const { max, p99 } = c.measured.latencyMs;
    const measured = `max ${ms(max)} ms vs bound ${ms(bound)} ms (p99 ${ms(p99)} ms); ${int(refused)} × 503`;
    return [measured, max <= bound && !refused];
  };
  const refusals = (why: string): Judged => {
    const c = f.refusals.find((x) => x.why === why);
    if (!c) return [undefined, false];
    const rounds = run.soldOut.filter((x) => x.why === why);
    const { how, firstOrderStatus: status, firstOrderMs } = c.reopen;
    const attempts = num(c.lockAttemptsPerRequest ?? NaN, 3);
    const shares = ofRounds(rounds, (x) => pct(f.refusalShare(x)));
    const beside = ` measured beside it (${int(c.echoBeside.perSecond)}/s)`;
    const measured = `${int(c.perSecond)} × 409/s = ${pct(f.refusalShare(c))} of the ceiling${beside}${shares}; ${attempts} lock attempts per request`;
    const reopened = rounds.every((x) => x.reopen.firstOrderStatus === 201 && !x.lockAttemptsPerRequest);
    const cpu = cpuView(c, msPerAnswer({ ...c, ...c.echoBeside }));
    return [
      `${measured}; first order after ${how}: ${status} in ${ms(firstOrderMs)} ms${cpu}`,
      f.refusalShare(c) >= 0.9 && reopened,
    ];
  };
  const events = (on: string): Judged => {
    const off = (c: SalesCase) => run.events.find((x) => x.events === 'off' && x.round === c.round);
    const share = (c: SalesCase) => c.perSecond / (off(c)?.perSecond ?? NaN);
    const rounds = run.events.filter((x) => x.events === on && off(x));
    const c = median(rounds, share);
    if (!c) return [undefined, false];
    const shares = ofRounds(rounds, (x) => pct(share(x)));
    return [`${int(c.perSecond)} vs ${int(off(c)!.perSecond)} orders/s = ${pct(share(c))}${shares}`, share(c) >= 0.9];
  };
  const { hot, hotOverEcho } = f;
  const echoOf = hotOverEcho && f.echoFor(hotOverEcho);
  const echoRounds = ofRounds(hotRounds, (x) => times(f.overEcho(x)));
  const echoed = hotOverEcho && echoOf && `${vs(hotOverEcho, echoOf)}${echoRounds}`;
  const ofCeiling =
    hot &&
    Number.isFinite(f.ceiling) &&
    `${int(hot.perSecond)}/s of ${int(f.ceiling)}/s = ${pct(hot.perSecond / f.ceiling)}${cpuView(hot)}`;
  const [stepSingle, stepHeadline] = [f.at('business-step', 1), f.at('business-step')];
  const stepped = stepSingle && stepHeadline && `${vs(stepHeadline, stepSingle)} (needs ×${num(0.95 * n, 1)})`;
  const steps = f.sweep('business-step').filter((c) => c.segments > 1 && c.segments <= 32);
  const speedups = steps.map((c) => `N=${c.segments} ${times(f.speedup(c))} (${pct(f.speedup(c) / c.segments)} of N)`);
  const single = f.at('real', 1)?.lock;
  const utilisation =
    single &&
    `${num(single.lockUtilisation)} (${num(single.acquisitionsPerSecond, 0)} acquisitions/s × ${ms(single.meanHoldMs)} ms hold)`;
  const holdBound = 1.1 * stepMs + 2;
  const holds = f.allOf('business-step').filter((c) => c.lock && (c.segments === 1 || c.segments === n));
  const holdTimes = holds.map((c) => `${c.label}: ${ms(c.lock!.meanHoldMs)} ms`).join('; ');
  const grown = run.growth.filter((c) => c.ledgerRows >= 2_000_000).sort((a, b) => b.ledgerRows - a.ledgerRows)[0];
  const empty = run.growth.find((c) => c.ledgerRows === 0);
  const emptyP50 = empty ? ` (${ms(empty.skuRead.latencyMs.p50)} ms with an empty ledger)` : '';
  const growth = grown && `${ms(grown.skuRead.latencyMs.p50)} ms with ${int(grown.ledgerRows)} rows${emptyP50}`;
  const memory = run.memory[0]?.memory;
  const rss =
    memory && `${mib(memory.maxRssBytes)} MiB during the round, peak ${mib(memory.peakRssBytes)} MiB since start`;
  const locked = casesWithBooks(run);
  const bad = locked.filter((c) => !c.books.ok || !c.warmupBooks.ok);
  const failed = bad.length ? `; failed: ${bad.map((c) => c.label).join(', ')}` : '';
  const balanced = locked.length && `${locked.length - bad.length} of ${locked.length} cases balanced${failed}`;
  const safe = (c: RunResults['oversell'][number]) =>
    expectedSafe(c) ? c.books.ok && c.books.oversold === 0 : c.books.oversold > 0;
  const oversold = run.oversell.map((c) => `${oversellName(c)}: ${int(c.books.oversold)}`);

  const judged: Record<string, Judged> = {
    alternative: againstAlternative(f.hotBeside ?? f.at('real'), 1.5),
    'alternative-single': againstAlternative(f.at('real', 1), 1.2),
    spread: onTraffic('spread', 0.8),
    mixed: onTraffic('mixed', 1.0),
    echo: [echoed, hotOverEcho && f.overEcho(hotOverEcho) >= 0.55],
    step: [stepped, stepHeadline && f.speedup(stepHeadline) >= 0.95 * n],
    'step-sweep': [speedups.join('; '), stepSingle && steps.every((c) => f.speedup(c) >= 0.9 * c.segments)],
    ceiling: [ofCeiling, hot && hot.perSecond >= 0.6 * f.ceiling],
    utilisation: [utilisation, single && single.lockUtilisation >= 0.8],
    'fair-real': fairness(f.at('real', 1)),
    'fair-step': fairness(stepSingle),
    'sold-out': refusals('sold-out'),
    'not-on-sale': refusals('not-on-sale'),
    'events-on': events('on'),
    'events-webhook': events('webhook'),
    hold: [holdTimes, holds.every((c) => c.lock!.meanHoldMs <= holdBound)],
    growth: [growth, grown && grown.skuRead.latencyMs.p50 <= 20],
    memory: [rss, memory && memory.peakRssBytes <= 250 * 2 ** 20],
    books: [balanced, bad.length === 0],
    oversell: [oversold.join('; '), run.oversell.every(safe)],
    ...lockTargets(f),
  };
  return { judged, holdBound };
}

/** The lock benchmark's targets: throughput against the better peer, K keys kept busy, the fair mode's longest wait. */
function lockTargets({ lockCell: cell, fastest }: RunFigures): Record<string, Judged> {
  const [ours, peer] = [fastest(cell(1, 0), true), fastest(cell(1, 0), false)];
  const fair = cell(1, 20).find((r) => r.contender === 'this-lock-fair');
  const ratio = ours && peer ? ours.sectionsPerSecond / peer.sectionsPerSecond : NaN;
  const rate = (r: LockCell) => `${r.contender} ${int(r.sectionsPerSecond)}/s`;
  const keysBusy = (r: LockCell): Judged => [
    `${int(r.sectionsPerSecond)}/s (holds lasted ${ms(r.meanHoldMs)} ms: ceiling ${int(20_000 / r.meanHoldMs)}/s)`,
    r.sectionsPerSecond >= 950,
  ];
  const ourCells = cell(20, 20).filter((r) => isOurs(r.contender));
  return {
    'lock-peer': [ours && peer && `${rate(ours)} vs ${rate(peer)} = ${times(ratio)}`, ratio >= 1.5],
    ...Object.fromEntries(ourCells.map((r) => [`keys-busy:${r.contender}`, keysBusy(r)])),
    'lock-fair': [fair && `${int(fair.maxWaitMs)} ms`, fair && fair.maxWaitMs <= 1.5 * fair.workers * 20],
  };
}
