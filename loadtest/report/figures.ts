import type { CpuUsage } from '../infra/cpu-usage.js';
import type { RunResults } from '../results.js';
import type { CeilingCase, Profile, SalesCase } from '../scenarios/sales.js';
import { HEADLINE_SEGMENTS } from '../scenarios/plan.js';

const mean = (values: number[]) => (values.length ? values.reduce((a, b) => a + b, 0) / values.length : NaN);

/** The figures the targets, tables and charts are stated in, derived once from a run. */
export class RunFigures {
  /** Single-instance ceilings measured in this run (first and last). */
  readonly ceilings: CeilingCase[];
  /** The HTTP ceiling every other figure is a fraction of: the mean of the single-instance measurements. */
  readonly ceiling: number;
  /** Last ceiling / first ceiling: how much the machine drifted during the run. */
  readonly ceilingDrift: number;
  /**
   * Service CPU per echo answer: the cost of the bare HTTP stack. Unlike rates, CPU per answer barely moves when
   * other processes load the machine, so it is the steadier yardstick.
   */
  readonly ceilingServiceMsPerAnswer: number;
  /** Answers/s of the bare express JSON echo: the limit of any express order service here. */
  readonly bareEcho: number;

  constructor(readonly run: RunResults) {
    this.ceilings = run.ceiling.filter((c) => c.instances === 1);
    this.ceiling = mean(this.ceilings.map((c) => c.perSecond));
    this.ceilingDrift = this.ceilings.length > 1 ? this.ceilings.at(-1)!.perSecond / this.ceilings[0]!.perSecond : NaN;
    this.ceilingServiceMsPerAnswer = mean(
      this.ceilings.map((c) => serviceMsPerAnswer(c.perSecond, c.cpu)).filter(Number.isFinite),
    );
    this.bareEcho = run.bareEcho[0]?.perSecond ?? NaN;
  }

  /**
   * The segment-count sweep of a profile: the real critical section as shipped (combining on); the business step
   * with combining off, to show what segmenting alone buys.
   */
  profile(profile: Profile): SalesCase[] {
    const combining = profile === 'real';
    return this.run.segments
      .filter((c) => c.profile === profile && c.combining === combining)
      .sort((a, b) => a.segments - b.segments);
  }

  at(profile: Profile, segments = HEADLINE_SEGMENTS): SalesCase | undefined {
    return this.profile(profile).find((c) => c.segments === segments);
  }

  variant(profile: Profile, segments: number, combining: boolean): SalesCase | undefined {
    return this.run.segments.find((c) => c.profile === profile && c.segments === segments && c.combining === combining);
  }

  /** Every case of the profile: the sweep, then the other combining mode's rows. */
  allOf(profile: Profile): SalesCase[] {
    const sweep = this.profile(profile);
    return [...sweep, ...this.run.segments.filter((c) => c.profile === profile && !sweep.includes(c))];
  }

  /** The alternative on the same traffic as a case (one hot SKU, spread or mixed). */
  alternativeFor(c: { traffic?: string }): SalesCase | undefined {
    return this.run.alternative.find((a) => a.traffic === c.traffic);
  }

  traffic(traffic: 'spread' | 'mixed'): SalesCase | undefined {
    return this.run.spread.find((c) => c.traffic === traffic);
  }

  /** Orders/s relative to the alternative on the same traffic. */
  overAlternative(c: SalesCase): number {
    return c.ordersPerSecond / (this.alternativeFor(c)?.ordersPerSecond ?? NaN);
  }

  /** Orders/s relative to the single lock of the same profile and combining mode. */
  speedup(c: SalesCase): number {
    return c.ordersPerSecond / (this.variant(c.profile, 1, c.combining)?.ordersPerSecond ?? NaN);
  }
}

export function serviceMsPerAnswer(perSecond: number, cpu: CpuUsage | null): number {
  return cpu && perSecond > 0 ? (cpu.cores.service / perSecond) * 1000 : NaN;
}
