// redlock@5's bundled types are not reachable through its package.json "exports": the part the benchmark uses.
declare module 'redlock' {
  export default class Redlock {
    constructor(clients: Iterable<import('ioredis').Redis>, settings?: { retryCount?: number });
    on(event: 'error', listener: (error: Error) => void): this;
    acquire(resources: string[], duration: number): Promise<{ release(): Promise<unknown> }>;
    quit(): Promise<void>;
  }
}
