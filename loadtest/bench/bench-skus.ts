import type { Db } from '../../src/db/database.js';
import { AppError } from '../../src/errors.js';
import { findBenchSku } from './bench.repository.js';

export interface BenchSku {
  id: number;
  sku: string;
  segmentCount: number;
  layoutVersion: number;
}

/**
 * SKU layouts for the benchmark routes. Benchmark SKUs are created for one run and never re-segmented, so a layout
 * read once stays true; the product's own directory is not involved.
 */
export class BenchSkus {
  private readonly known = new Map<string, Promise<BenchSku>>();

  constructor(private readonly db: Db) {}

  get(sku: string): Promise<BenchSku> {
    let entry = this.known.get(sku);
    if (!entry) {
      entry = this.load(sku);
      this.known.set(sku, entry);
      entry.catch(() => this.known.delete(sku));
    }
    return entry;
  }

  private async load(sku: string): Promise<BenchSku> {
    const row = await findBenchSku(this.db, sku);
    if (!row) throw new AppError('sku_not_found', `SKU '${sku}' does not exist`);
    return { id: row.id, sku: row.sku, segmentCount: row.segment_count, layoutVersion: row.layout_version };
  }
}
