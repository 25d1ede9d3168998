// redlock@5's bundled types are not reachable through its package.json "exports": the part the benchmark uses.
declare module 'redlock' {
  import type { EventEmitter } from 'node:events';
  import type { Redis } from 'ioredis';

  export interface Lock {
    release(): Promise<unknown>;
  }
  export default class Redlock extends EventEmitter {
    constructor(
      clients: Iterable<Redis>,
      settings?: { retryCount?: number; retryDelay?: number; retryJitter?: number; driftFactor?: number },
    );
    acquire(resources: string[], duration: number): Promise<Lock>;
    quit(): Promise<void>;
  }
}
