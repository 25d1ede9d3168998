import type { LockBackendKind } from '../../src/lock/distributed-lock.js';
import { type LocalServiceOptions, type ServiceTarget, startService } from '../infra/service-process.js';
import type { RunContext } from './context.js';
import { WARMUP_STOCK } from './sales.js';

/** A service some rows share (the same object): on the run's Redis unless it asks for a Redis Cluster. */
export interface ServiceSpec extends LocalServiceOptions {
  onRedisCluster?: boolean;
  lockBackend?: LockBackendKind;
}

/** The service as shipped: the one a --url target stands for. */
export const REAL: ServiceSpec = { label: 'service (real critical section)' };

/**
 * The running service of each spec, started and primed on first use. A case whose service died under it is
 * repeated on a fresh one, and the incident recorded: a result is only ever taken from an uninterrupted case.
 */
export class Services {
  private readonly running = new Map<ServiceSpec, ServiceTarget>();

  constructor(
    private readonly ctx: RunContext,
    private readonly remote: ServiceTarget | null,
    private readonly nodeArgs: string[],
    private readonly incidents: string[],
  ) {}

  /** Why this run cannot have the spec's service; undefined when it can. */
  unavailable(spec: ServiceSpec): string | undefined {
    if (this.remote)
      return spec === REAL
        ? undefined
        : `${spec.label}: a service this run starts; a --url target is measured as it is`;
    if (spec.onRedisCluster && 'REDIS_CLUSTER_NODES' in this.ctx.backing!.redisEnv)
      return 'a run on a Redis Cluster has no one Redis to compare it with';
  }

  async use<T>(spec: ServiceSpec, measure: (service: ServiceTarget) => Promise<T>): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      const service = await this.get(spec);
      try {
        return await measure(service);
      } catch (error) {
        if (service.alive() || attempt >= 3) throw error;
        const note = `${service.diagnostics().split('\n')[0]} during a case (${(error as Error).message.split('\n')[0]}); started a fresh one and repeated the case`;
        this.incidents.push(note);
        this.ctx.progress.note(note);
        await this.release(spec);
      }
    }
  }

  async release(spec: ServiceSpec): Promise<void> {
    const service = this.running.get(spec);
    this.running.delete(spec);
    if (service && service !== this.remote) {
      this.ctx.started.delete(service);
      await service.stop();
    }
  }

  private async get(spec: ServiceSpec): Promise<ServiceTarget> {
    let service = this.running.get(spec);
    if (service) return service;
    service = this.remote ?? (await this.start(spec));
    this.running.set(spec, service);
    // A freshly started process runs its first seconds unoptimised (JIT) and with cold pools: orders through the
    // whole HTTP stack on a throwaway SKU, so the first case is not the one that pays. The echo has no SKUs.
    if (spec.program !== 'echo') {
      const sku = await this.ctx.createSku(service, 'prime', WARMUP_STOCK, 4);
      const body = { sku, quantity: this.ctx.settings.quantity };
      const priming = { title: `priming ${service.label}`, body, durationSeconds: this.ctx.settings.warmupSeconds };
      await this.ctx.round(service, priming);
      await this.ctx.settle(service);
    }
    return service;
  }

  private async start({ onRedisCluster, lockBackend, ...options }: ServiceSpec): Promise<ServiceTarget> {
    const backing = this.ctx.backing!;
    this.ctx.progress.note(`starting ${options.label}…`);
    const env: Record<string, string> = {
      ...options.env,
      ...(onRedisCluster && (await backing.redisCluster()).redisEnv),
    };
    if (lockBackend) env.LOCK_BACKEND = lockBackend;
    if (lockBackend === 'redlock')
      env.REDIS_LOCK_URLS = (await Promise.all(backing.redlockNodes.map(async (node) => (await node()).url))).join();
    if (lockBackend === 'zookeeper') env.ZOOKEEPER_CONNECT = (await backing.zookeeper()).connect;
    const service = await startService(backing, { ...options, env, nodeArgs: this.nodeArgs });
    this.ctx.started.add(service);
    // Watch a round live: the page lists the run's SKUs (the alternative and the echo have none).
    if (!options.program) this.ctx.progress.note(`${options.label}: dashboard ${dashboardUrl(service)}`);
    return service;
  }
}

/** The service's dashboard, with its token in the fragment (which the browser never sends) when it has one. */
export function dashboardUrl(service: { url: string; adminToken: string | undefined }): string {
  return `${service.url}/dashboard${service.adminToken ? `#token=${encodeURIComponent(service.adminToken)}` : ''}`;
}
