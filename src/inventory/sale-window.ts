/** When a SKU may be ordered, in milliseconds since the epoch by the shared clock; null leaves that side open. */
export interface SaleWindow {
  /** Orders open at this instant (inclusive). */
  readonly saleStartsAt: number | null;
  /** Orders close at this instant (exclusive). */
  readonly saleEndsAt: number | null;
}

/** Whether the SKU is on sale at `now` (shared clock). */
export function isOnSale(window: SaleWindow, now: number): boolean {
  return hasOpened(window, now) && !hasEnded(window, now);
}

/** Whether the window has opened by `now`: a waiting line draws its pre-line then. */
export function hasOpened(window: SaleWindow, now: number): boolean {
  return window.saleStartsAt === null || now >= window.saleStartsAt;
}

/** Whether the window has closed by `now`. */
export function hasEnded(window: SaleWindow, now: number): boolean {
  return window.saleEndsAt !== null && now >= window.saleEndsAt;
}
