// The fleet: one hot SKU sold by 1, 2, 4… instances whose Redis and Postgres sit 0 or D ms away, on 1, 4, 20…
// segments. Where a segment lock is held across round trips that cannot be batched away, segments pay.
import type { BackingServices } from '../infra/backing-services.js';
import { type DelayProxy, startDelayProxy } from '../infra/delay-proxy.js';
import type { ServiceTarget } from '../infra/service-process.js';
import type { RunContext } from './context.js';
import { compareSales, type SalesSpec } from './sales.js';

/**
 * The fleet's services keep a small general pool (the order path has its own BATCHES_IN_FLIGHT connections): two
 * fleets of four instances at once stay within the embedded Postgres's connections.
 */
export const FLEET_ENV = { PG_POOL_SIZE: '4' };

export const fleetLabel = (instances: number, delayMs: number) =>
  `${instances} instance${instances > 1 ? 's' : ''} · Redis and Postgres ${delayMs} ms away`;

/**
 * REDIS_URL and DATABASE_URL of the run's servers behind a proxy each that delays every chunk `delayMs` each way;
 * `stop` ends both proxies.
 */
export async function delayedBacking(backing: BackingServices, delayMs: number) {
  const proxies: DelayProxy[] = [];
  const behind = async (url: string) => {
    const { hostname, port } = new URL(url);
    const proxy = await startDelayProxy({ host: hostname, port: Number(port) }, delayMs);
    proxies.push(proxy);
    return proxy.url(url);
  };
  const stop = () => Promise.all(proxies.map((proxy) => proxy.stop())).then(() => {});
  try {
    const env = {
      REDIS_URL: await behind(backing.redisEnv.REDIS_URL),
      DATABASE_URL: await behind(backing.databaseUrl),
    };
    return { env, stop };
  } catch (error) {
    await stop();
    throw error;
  }
}

/**
 * Every segment count on every delay's service (`services`, in the order of `delaysMs`) of one instance count, all
 * cells measured in alternating turns so that a machine whose speed drifts weighs on each alike.
 */
export async function measureFleet(
  ctx: RunContext,
  services: ServiceTarget[],
  instances: number,
  delaysMs: number[],
  segmentCounts: number[],
) {
  const specs: SalesSpec[] = delaysMs.flatMap((delayMs, i) =>
    segmentCounts.map((segments) => ({
      id: `fleet-${instances}-${delayMs}ms-${segments}`,
      label: `${fleetLabel(instances, delayMs)} · ${segments === 1 ? 'single lock' : `${segments} segments`}`,
      service: services[i]!,
      instances,
      segments,
      tags: { delayMs },
    })),
  );
  return compareSales(ctx, specs);
}
