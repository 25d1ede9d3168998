import { AsyncLocalStorage } from 'node:async_hooks';
import { randomUUID } from 'node:crypto';

/**
 * Who holds a lock. Node has no threads, so the logical owner is an async call chain: everything that runs inside
 * one `runAsLockOwner` callback (awaits, timers, promises it starts) is the same owner and may re-enter the locks it
 * holds. Concurrent branches started inside one scope share that ownership, as threads sharing a Java lock owner would.
 */
interface OwnerScope {
  readonly id: string;
}

const scopes = new AsyncLocalStorage<OwnerScope>();

/** Runs `fn` as one lock owner; inside an existing scope it stays that owner (reentrancy across nested calls). */
export function runAsLockOwner<T>(fn: () => T): T {
  if (scopes.getStore()) return fn();
  return scopes.run({ id: newOwnerId() }, fn);
}

/** The owner of the current call chain, or undefined outside every scope. */
export function currentLockOwner(): string | undefined {
  return scopes.getStore()?.id;
}

/** Owner ids are globally unique, so stores can compare them across processes. */
export function newOwnerId(): string {
  return randomUUID();
}
