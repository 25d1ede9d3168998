import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Db } from '../../src/db/database.js';
import { StockApi } from '../client/stock-api.js';
import { CpuMeter, type CpuUsage } from '../infra/cpu-usage.js';
import type { ServiceTarget } from '../infra/service-process.js';
import type { RunSettings } from '../results.js';
import type { RunProgress } from '../runner/progress.js';

/** What every scenario gets: the settings, progress output, and the database for the books (when reachable). */
export class RunContext {
  private readonly runTag = `lt${Date.now().toString(36)}${randomBytes(2).toString('hex')}`;
  private counter = 0;
  /** Seconds the current case waited for quiet before its warm-up. */
  private lastQuietWait = 0;

  constructor(
    readonly settings: RunSettings,
    readonly progress: RunProgress,
    /** Postgres of the target, to audit the books directly; null when only the API can be checked. */
    readonly db: Db | null,
    /** How to recognise the run's own Redis and Postgres processes; null when they are not on this machine's /proc. */
    private readonly processMarkers: { postgres?: string; redis?: string[] } | null,
  ) {}

  /** Starts CPU accounting for a measured round on a local service; the returned function ends it. */
  meterCpu(service: ServiceTarget): () => CpuUsage | null {
    const meter = this.cpuMeter(service);
    if (!meter) return () => null;
    const end = meter.start();
    const waited = this.lastQuietWait;
    return () => ({ ...end(), waitedForQuietSeconds: waited });
  }

  /**
   * On a shared machine, waits before a case's warm-up (up to a bound) until other processes leave the CPUs mostly
   * free, so that cases are compared under like conditions. Decided before measuring, and reported per case.
   */
  async waitForQuiet(service: ServiceTarget): Promise<void> {
    this.lastQuietWait = 0;
    const meter = this.cpuMeter(service);
    const { quietCores, quietMaxWaitSeconds } = this.settings;
    if (!meter || quietCores <= 0) return;
    const started = performance.now();
    let announced = false;
    for (;;) {
      const end = meter.start();
      await sleep(1000);
      const others = end().cores.others;
      this.lastQuietWait = (performance.now() - started) / 1000;
      if (others <= quietCores || this.lastQuietWait >= quietMaxWaitSeconds) return;
      if (!announced) {
        this.progress.note(
          `other processes use ${others.toFixed(2)} cores; waiting up to ${quietMaxWaitSeconds} s for them to drop to ${quietCores}…`,
        );
        announced = true;
      }
    }
  }

  private cpuMeter(service: ServiceTarget): CpuMeter | null {
    if (!this.processMarkers || service.allPids().length === 0 || !CpuMeter.available()) return null;
    return new CpuMeter(() => service.allPids(), this.processMarkers);
  }

  api(service: ServiceTarget): StockApi {
    return new StockApi(service.url, service.adminToken);
  }

  /** A SKU name no earlier run or scenario used. */
  skuName(label: string): string {
    return `${this.runTag}-${label}-${++this.counter}`.slice(0, 64);
  }
}
