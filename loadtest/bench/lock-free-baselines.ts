import { randomUUID } from 'node:crypto';
import type { Db } from '../../src/db/database.js';
import { outOfStock } from '../../src/inventory/refusals.js';
import { redisKeys } from '../../src/lock/keys.js';
import type { RedisClient } from '../../src/redis/connections.js';
import { availableOfSku, recordSale, sellIfAvailable } from './bench.repository.js';
import type { BenchSkus } from './bench-skus.js';
import type { DemoSale } from './oversell-demo.js';

/*
 * Checks and decrements a stock counter atomically.
 *   KEYS[1] the counter; ARGV[1] quantity
 *   Returns the stock left (>= 0), -1 when short, -2 when the counter does not exist yet.
 * Kept beside its only caller, a benchmark baseline; the service's own scripts live in src/lock/lua.
 */
const takeStockLua = `
local stock = redis.call('GET', KEYS[1])
if not stock then return -2 end
stock = tonumber(stock)
local quantity = tonumber(ARGV[1])
if stock < quantity then return -1 end
return redis.call('DECRBY', KEYS[1], quantity)
`;

interface BaselineCommands {
  benchTakeStock(key: string, quantity: number): Promise<number>;
}

/**
 * Lock-free designs a user might choose instead of segment locks, as reference points on the same machine: the
 * stock decremented by Postgres itself (a conditional UPDATE on one of the SKU's rows), or by a Redis script with
 * only the ledger in Postgres. Both write the same order and ledger rows as the product.
 */
export class LockFreeBaselines {
  private readonly commands: BaselineCommands;

  constructor(
    private readonly db: Db,
    private readonly redis: RedisClient,
    private readonly skus: BenchSkus,
  ) {
    redis.defineCommand('benchTakeStock', { numberOfKeys: 1, lua: takeStockLua });
    // defineCommand adds the method at run time; this names its type without widening ioredis' own.
    this.commands = redis as unknown as BaselineCommands;
  }

  /** Tries the SKU's rows from a random one onwards; each try is one statement that deducts only if enough is there. */
  async sellConditional(skuName: string, quantity: number): Promise<DemoSale> {
    const sku = await this.skus.get(skuName);
    const start = Math.floor(Math.random() * sku.segmentCount);
    for (let i = 0; i < sku.segmentCount; i++) {
      const orderId = randomUUID();
      const segment = (start + i) % sku.segmentCount;
      if (
        await sellIfAvailable(this.db, { orderId, skuId: sku.id, layoutVersion: sku.layoutVersion, segment, quantity })
      ) {
        return { orderId, sku: sku.sku, quantity };
      }
    }
    throw outOfStock(sku.sku, quantity, await availableOfSku(this.db, sku.id));
  }

  /** Stock in a Redis counter (seeded once from Postgres), decremented by a script; the ledger goes to Postgres. */
  async sellFromCounter(skuName: string, quantity: number): Promise<DemoSale> {
    const sku = await this.skus.get(skuName);
    const key = redisKeys.benchStock(sku.sku);
    let left = await this.commands.benchTakeStock(key, quantity);
    if (left === -2) {
      await this.redis.set(key, await availableOfSku(this.db, sku.id), 'NX');
      left = await this.commands.benchTakeStock(key, quantity);
    }
    if (left < 0) throw outOfStock(sku.sku, quantity, Number(await this.redis.get(key)));
    const orderId = randomUUID();
    try {
      await recordSale(this.db, { orderId, skuId: sku.id, layoutVersion: sku.layoutVersion, segment: 0, quantity });
    } catch (error) {
      // The ledger write failed: give the units back, or they would be neither sold nor available.
      await this.redis.incrby(key, quantity).catch(() => {});
      throw error;
    }
    return { orderId, sku: sku.sku, quantity };
  }

  /** The counter's stock, or null before the first sale seeded it. */
  async counterStock(skuName: string): Promise<number | null> {
    const value = await this.redis.get(redisKeys.benchStock(skuName));
    return value === null ? null : Number(value);
  }
}
