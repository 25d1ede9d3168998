import { randomBytes } from 'node:crypto';
import type { Db } from '../../src/db/database.js';
import { StockApi } from '../client/stock-api.js';
import type { RunSettings } from '../results.js';
import { CpuMeter, type CpuUsage } from '../infra/cpu-usage.js';
import type { ServiceTarget } from '../infra/service-process.js';
import type { RunProgress } from '../runner/progress.js';

/** What every scenario gets: the settings, progress output, and the database for the books (when reachable). */
export class RunContext {
  private readonly runTag = `lt${Date.now().toString(36)}${randomBytes(2).toString('hex')}`;
  private counter = 0;

  constructor(
    readonly settings: RunSettings,
    readonly progress: RunProgress,
    /** Postgres of the target, to audit the books directly; null when only the API can be checked. */
    readonly db: Db | null,
    /** How to recognise the run's own Redis and Postgres processes; null when they are not on this machine's /proc. */
    private readonly processMarkers: { postgres?: string; redis?: string } | null,
  ) {}

  /** Starts CPU accounting for a round on a local service; the returned function ends it. */
  meterCpu(service: ServiceTarget): () => CpuUsage | null {
    if (!this.processMarkers || service.allPids().length === 0 || !CpuMeter.available()) return () => null;
    return new CpuMeter(() => service.allPids(), this.processMarkers).start();
  }

  api(service: ServiceTarget): StockApi {
    return new StockApi(service.url, service.adminToken);
  }

  /** A SKU name no earlier run or scenario used. */
  skuName(label: string): string {
    return `${this.runTag}-${label}-${++this.counter}`.slice(0, 64);
  }
}
