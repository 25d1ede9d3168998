/** What the report's tables and targets share: number formats and a run's key figures. */
import type { CpuUsage } from '../infra/process-usage.js';
import type { RunResults } from '../run-results.js';
import type { RoundResult } from '../runner/round.js';
import { refusalKinds } from '../scenarios/cases.js';
import { HEADLINE_SEGMENTS } from '../scenarios/plan.js';
import type { Profile, SalesCase } from '../scenarios/sales.js';

// Fixed, locale-independent formats; '–' for what was not measured.
const finite = (format: (n: number) => string) => (n: number) => (Number.isFinite(n) ? format(n) : '–');
export const int = finite((n) => Math.round(n).toLocaleString('en-US'));
export const ms = finite((n) => (n >= 100 ? int(n) : n.toFixed(n >= 10 ? 1 : 2)));
export const pct = finite((n) => `${(n * 100).toFixed(n < 0.1 ? 1 : 0)} %`);
export const times = finite((n) => `×${n.toFixed(n >= 10 ? 1 : 2)}`);
export const num = (n: number, digits = 2) => finite((x) => x.toFixed(digits))(n);
export const mib = (bytes: number) => (bytes / 2 ** 20).toFixed(0);
/** The formats the report's template calls by name. */
export const formats = { int, ms, pct, times, num, mib };
const mean = (values: number[]) => (values.length ? values.reduce((a, b) => a + b, 0) / values.length : NaN);
/** The median round (the lower of two) by rate, or by `by`: what a comparison measured in rounds is judged on. */
export const median = <T extends { perSecond: number }>(rounds: T[], by = (r: T) => r.perSecond) =>
  [...rounds].sort((a, b) => by(a) - by(b))[(rounds.length - 1) >> 1];

type InRound = { round?: number };
/** The shape every measured case shares: the CPU table mixes cases of every kind. */
export type Answers = InRound & { label: string; perSecond: number; measured: RoundResult; cpu: CpuUsage | null };
export const msPerAnswer = (c: Answers, group: keyof CpuUsage['cores'] = 'service') =>
  c.cpu && c.perSecond > 0 ? (c.cpu.cores[group] / c.perSecond) * 1000 : NaN;
/** This lock, in either mode or on any backend (the others are the peer libraries). */
export const isOurs = (name: string) => name.startsWith('this-lock') || name.startsWith('backend:');
/** An oversell case's guard and instances, without the scenario's name. */
export const oversellName = (c: { label: string }) => c.label.replace(/^oversell · /, '');
/** Cases that must not oversell: the Redis lock anywhere, a local mutex inside one process. */
export const expectedSafe = (c: { guard: string; instances: number }) =>
  c.guard === 'redis-lock' || (c.guard === 'local-mutex' && c.instances === 1);

export type RunFigures = ReturnType<typeof runFigures>;

/** The figures the targets and tables are stated in, derived once from a run. */
export function runFigures(run: RunResults) {
  const ceilings = run.ceiling.filter((c) => c.instances === 1);
  // The real section's sweep is as shipped (combining on), the business step's with combining off.
  const sweep = (p: Profile, on = p === 'real') =>
    run.segments.filter((c) => c.profile === p && c.combining === on).sort((a, b) => a.segments - b.segments);
  const at = (p: Profile, segments = HEADLINE_SEGMENTS, combining = p === 'real') =>
    run.segments.find((c) => c.profile === p && c.segments === segments && c.combining === combining);
  // A comparison is judged round by round: the two sides of a round took turns, so their ratio compares the code, not
  // the machine's drift over minutes; the median round by that ratio stands for the comparison. A case measured
  // outside the rounds is set against the other side's median round.
  const sameRound = <T extends Answers>(cases: T[], c: InRound) =>
    c.round === undefined ? median(cases) : cases.find((x) => x.round === c.round);
  const alternatives = (traffic?: string) => run.alternative.filter((a) => a.traffic === traffic);
  const alternativeFor = (c: InRound & { traffic?: string }) => sameRound(alternatives(c.traffic), c);
  const overAlternative = (c: SalesCase) => c.perSecond / (alternativeFor(c)?.perSecond ?? NaN);
  const echoFor = (c: InRound) => sameRound(run.bareEcho, c);
  const overEcho = (c: Answers) => c.perSecond / (echoFor(c)?.perSecond ?? NaN);
  /** The product's rounds beside its yardsticks on a traffic (one hot SKU: none). */
  const roundsOn = (kind?: 'spread' | 'mixed') => run.spread.filter((c) => c.traffic === kind);
  const traffic = (kind?: 'spread' | 'mixed') => median(roundsOn(kind), overAlternative);
  // The HTTP ceiling every other figure is a fraction of.
  const ceiling = mean(ceilings.map((c) => c.perSecond));
  const refusalShare = (c: RunResults['soldOut'][number]) => c.perSecond / c.echoBeside.perSecond;
  return {
    run,
    ceiling,
    /** Service CPU per echo answer: unlike rates, it barely moves when other processes load the machine. */
    ceilingServiceMs: mean(ceilings.map((c) => msPerAnswer(c)).filter(Number.isFinite)),
    echoFor,
    overEcho,
    hotOverEcho: median(roundsOn(), overEcho),
    roundsOn,
    sweep,
    at,
    product: [1, HEADLINE_SEGMENTS].flatMap((n) => at('real', n) ?? []),
    allOf: (p: Profile) => [...sweep(p), ...sweep(p, p !== 'real')],
    alternativeFor,
    /** The product on one hot SKU beside the alternative (none when only the sweep measured it). */
    hotBeside: traffic(),
    /** The hot SKU's case for targets without a yardstick in its rounds: its median round by rate, else the sweep's. */
    hot: median(roundsOn()) ?? at('real'),
    traffic,
    refusalShare,
    refusals: refusalKinds.flatMap((why) => {
      const rounds = run.soldOut.filter((c) => c.why === why);
      return rounds.length ? [median(rounds, refusalShare)!] : [];
    }),
    overAlternative,
    speedup: (c: SalesCase) => c.perSecond / (at(c.profile, 1, c.combining)?.perSecond ?? NaN),
    // The lock benchmark's cell of K keys held H ms, and its fastest contender of this lock or of the peers.
    lockCell: (keys: number, holdMs: number) => run.locks.filter((r) => r.keys === keys && r.holdMs === holdMs),
    fastest: (cell: RunResults['locks'], ours: boolean) =>
      cell.filter((r) => isOurs(r.contender) === ours).sort((a, b) => b.sectionsPerSecond - a.sectionsPerSecond)[0],
  };
}
