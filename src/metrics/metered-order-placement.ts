import { OrderPlacement, type OrderRequest, type PlacedOrder } from '../inventory/order-placement.js';
import type { ServiceMetrics } from './service-metrics.js';

/**
 * The order flow, unchanged, with each placement observed as one unit: outcome, duration and the per-order figures
 * its hooks gather. Pass `metrics.orderFlowHooks` as the flow's hooks.
 */
export class MeteredOrderPlacement extends OrderPlacement {
  constructor(
    private readonly metrics: ServiceMetrics,
    ...flow: ConstructorParameters<typeof OrderPlacement>
  ) {
    super(...flow);
  }

  override place(request: OrderRequest): Promise<PlacedOrder> {
    return this.metrics.observeOrder(
      () => super.place(request),
      (placed) => (placed.replayed ? 'replayed' : 'placed'),
    );
  }
}
