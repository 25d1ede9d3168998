import type { CeilingCase, Profile, RunResults, SalesCase } from '../results.js';
import { HEADLINE_SEGMENTS } from '../scenarios/run-all.js';

/** Whether the segment-count sweep of each profile ran with combining on. */
const SWEEP_COMBINING: Record<Profile, boolean> = { real: true, 'business-step': false };

/** The figures the targets and tables are stated in, derived once from a run. */
export class RunFigures {
  constructor(readonly run: RunResults) {}

  /** Single-instance ceilings measured in this run (first and last). */
  get ceilings(): CeilingCase[] {
    return this.run.ceiling.filter((c) => c.instances === 1);
  }

  /** The HTTP ceiling every other figure is a fraction of: the mean of the single-instance measurements. */
  get ceiling(): number {
    const values = this.ceilings.map((c) => c.perSecond);
    return values.length ? values.reduce((a, b) => a + b, 0) / values.length : NaN;
  }

  /** Last ceiling / first ceiling: how much the machine drifted during the run. */
  get ceilingDrift(): number {
    const [first, ...rest] = this.ceilings;
    const last = rest.at(-1);
    return first && last ? last.perSecond / first.perSecond : NaN;
  }

  /**
   * Service CPU per echo answer in the single-instance ceiling rounds: the cost of the bare HTTP stack. Unlike
   * rates, CPU per answer barely moves when other processes load the machine, so it is the steadier yardstick.
   */
  get ceilingServiceMsPerAnswer(): number {
    const values = this.ceilings
      .filter((c) => c.cpu && c.perSecond > 0)
      .map((c) => (c.cpu!.cores.service / c.perSecond) * 1000);
    return values.length ? values.reduce((a, b) => a + b, 0) / values.length : NaN;
  }

  serviceMsPerAnswer(perSecond: number, cpu: { cores: { service: number } } | null): number {
    return cpu && perSecond > 0 ? (cpu.cores.service / perSecond) * 1000 : NaN;
  }

  /**
   * The segment-count sweep of a profile: the real critical section as shipped (combining on); the business step
   * with combining off, to show what segmenting alone buys.
   */
  profile(profile: Profile): SalesCase[] {
    return this.run.segments
      .filter((c) => c.profile === profile && c.combining === SWEEP_COMBINING[profile])
      .sort((a, b) => a.segments - b.segments);
  }

  at(profile: Profile, segments: number): SalesCase | undefined {
    return this.profile(profile).find((c) => c.segments === segments);
  }

  /** A case of the profile with combining on or off, whichever the sweep used. */
  variant(profile: Profile, segments: number, combining: boolean): SalesCase | undefined {
    return this.run.segments.find((c) => c.profile === profile && c.segments === segments && c.combining === combining);
  }

  /** Every case of the profile: the sweep, then the other combining mode's rows. */
  allOf(profile: Profile): SalesCase[] {
    const sweep = this.profile(profile);
    return [...sweep, ...this.run.segments.filter((c) => c.profile === profile && !sweep.includes(c))];
  }

  /** The alternative a user would write instead on one hot SKU, when measured. */
  get alternative(): SalesCase | undefined {
    return this.alternativeFor({});
  }

  /** The alternative on the same traffic as a case (one hot SKU, spread or mixed). */
  alternativeFor(c: Pick<SalesCase, 'traffic'>): SalesCase | undefined {
    return this.run.alternative.find((a) => a.traffic === c.traffic);
  }

  /** The product on spread or mixed traffic, when measured. */
  traffic(traffic: 'spread' | 'mixed'): SalesCase | undefined {
    return this.run.spread?.find((c) => c.traffic === traffic);
  }

  /** Answers/s of the bare express JSON echo: the limit of any express order service here. */
  get bareEcho(): number {
    return this.run.bareEcho?.[0]?.perSecond ?? NaN;
  }

  /** Orders/s relative to the alternative on the same traffic. */
  overAlternative(c: SalesCase): number {
    const alternative = this.alternativeFor(c);
    return alternative && alternative.ordersPerSecond > 0 ? c.ordersPerSecond / alternative.ordersPerSecond : NaN;
  }

  singleLock(profile: Profile): SalesCase | undefined {
    return this.at(profile, 1);
  }

  headline(profile: Profile): SalesCase | undefined {
    return this.at(profile, HEADLINE_SEGMENTS);
  }

  /** Orders/s relative to the single lock of the same profile and combining mode. */
  speedup(c: SalesCase): number {
    const single = this.variant(c.profile, 1, c.combining);
    return single && single.ordersPerSecond > 0 ? c.ordersPerSecond / single.ordersPerSecond : NaN;
  }

  /** The fairness bound for a single-lock case: 1.5 × concurrent waiters × mean hold time. */
  fairnessBoundMs(c: SalesCase): number {
    return c.lock ? 1.5 * c.connections * c.lock.meanHoldMs : NaN;
  }
}
