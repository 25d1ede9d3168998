// The parts of node-zookeeper-client (which ships no types) that the ZooKeeper lock backend uses.
declare module 'node-zookeeper-client' {
  import type { EventEmitter } from 'node:events';

  export interface Stat {
    version: number;
    /** The session that owns an ephemeral node (8 bytes), all zero for a persistent one. */
    ephemeralOwner: Buffer;
  }

  export interface ZooKeeperEvent {
    getType(): number;
    getName(): string;
    getPath(): string;
  }

  export type Watcher = (event: ZooKeeperEvent) => void;

  export interface Client extends EventEmitter {
    connect(): void;
    close(): void;
    getSessionId(): Buffer;
    getSessionTimeout(): number;
    getState(): State;
    create(
      path: string,
      data: Buffer | null,
      mode: number,
      callback: (error: Error | null, path: string) => void,
    ): void;
    mkdirp(path: string, callback: (error: Error | null, path: string) => void): void;
    remove(path: string, version: number, callback: (error: Error | null) => void): void;
    exists(
      path: string,
      watcher: Watcher | undefined,
      callback: (error: Error | null, stat: Stat | null) => void,
    ): void;
    getChildren(path: string, callback: (error: Error | null, children: string[], stat: Stat) => void): void;
    getData(path: string, callback: (error: Error | null, data: Buffer | null, stat: Stat) => void): void;
    setData(path: string, data: Buffer, version: number, callback: (error: Error | null, stat: Stat) => void): void;
  }

  export interface State {
    readonly name: string;
    readonly code: number;
  }
  export const State: { SYNC_CONNECTED: State; DISCONNECTED: State; EXPIRED: State };
  export const CreateMode: {
    PERSISTENT: number;
    EPHEMERAL: number;
    PERSISTENT_SEQUENTIAL: number;
    EPHEMERAL_SEQUENTIAL: number;
  };
  export const Exception: {
    CONNECTION_LOSS: number;
    NO_NODE: number;
    BAD_VERSION: number;
    NODE_EXISTS: number;
    SESSION_EXPIRED: number;
  };
  export function createClient(
    connectionString: string,
    options?: { sessionTimeout?: number; spinDelay?: number; retries?: number },
  ): Client;
}
