import type { CeilingCase, RunResults, SalesCase } from '../results.js';
import { HEADLINE_SEGMENTS } from '../scenarios/run-all.js';

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

  profile(profile: 'real' | 'business-step'): SalesCase[] {
    return this.run.segments.filter((c) => c.profile === profile).sort((a, b) => a.segments - b.segments);
  }

  at(profile: 'real' | 'business-step', segments: number): SalesCase | undefined {
    return this.profile(profile).find((c) => c.segments === segments);
  }

  singleLock(profile: 'real' | 'business-step'): SalesCase | undefined {
    return this.at(profile, 1);
  }

  headline(profile: 'real' | 'business-step'): SalesCase | undefined {
    return this.at(profile, HEADLINE_SEGMENTS);
  }

  /** Orders/s relative to the single lock of the same profile. */
  speedup(c: SalesCase): number {
    const single = this.singleLock(c.profile);
    return single && single.ordersPerSecond > 0 ? c.ordersPerSecond / single.ordersPerSecond : NaN;
  }

  /** The fairness bound for a single-lock case: 1.5 × concurrent waiters × mean hold time. */
  fairnessBoundMs(c: SalesCase): number {
    return c.lock ? 1.5 * c.connections * c.lock.meanHoldMs : NaN;
  }
}
