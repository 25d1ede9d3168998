import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import path from 'node:path';
import { freePort } from '../../../src/dev/free-port.js';
import {
  ChildServer,
  LoopbackServer,
  MissingDependencyError,
  type ServerOptions,
  type StopMode,
  serverDir,
} from '../../../src/dev/servers/server-process.js';

/** Debian's `zookeeper` package puts the server here; ZOOKEEPER_JAR overrides it. */
const ZOOKEEPER_JAR = process.env.ZOOKEEPER_JAR ?? '/usr/share/java/zookeeper.jar';

/** Why ZooKeeper cannot be started here, or undefined when it can (callers skip or fail on it). */
export function zookeeperMissing(): string | undefined {
  if (!existsSync(ZOOKEEPER_JAR)) return `${ZOOKEEPER_JAR} not found (apt-get install zookeeper)`;
  if (spawnSync('java', ['-version']).error) return 'java not found on PATH (apt-get install zookeeper brings one)';
  return undefined;
}

/**
 * A standalone ZooKeeper server (the lock tests' and the lock benchmark's): the Debian package's jar on a free
 * loopback port, its data in a temporary directory of its own.
 */
export class ZooKeeperServer extends LoopbackServer {
  private process: ChildServer | undefined;

  static async start(options: ServerOptions = {}): Promise<ZooKeeperServer> {
    const missing = zookeeperMissing();
    if (missing) throw new MissingDependencyError(`cannot start ZooKeeper: ${missing}`);
    const { dir, ownsDir } = serverDir(undefined, 'zookeeper');
    const server = new ZooKeeperServer(await freePort(), dir, ownsDir, options.stopMode ?? 'graceful');
    try {
      mkdirSync(path.join(dir, 'data'));
      writeFileSync(
        path.join(dir, 'zoo.cfg'),
        [
          // Short ticks: sessions of a few hundred ms are allowed, so expiry tests stay quick.
          'tickTime=200',
          `dataDir=${path.join(dir, 'data')}`,
          `clientPort=${server.port}`,
          'clientPortAddress=127.0.0.1',
          'minSessionTimeout=400',
          'maxSessionTimeout=60000',
          'admin.enableServer=false',
          // `ruok` is how resume() knows it is serving.
          '4lw.commands.whitelist=ruok',
          'forceSync=no',
        ].join('\n'),
      );
      await server.resume();
    } catch (error) {
      await server.abandon();
      throw error;
    }
    return server;
  }

  /** The connection string of node-zookeeper-client and LOCK_BACKEND=zookeeper's ZOOKEEPER_CONNECT. */
  get connect(): string {
    return `127.0.0.1:${this.port}`;
  }

  async resume(): Promise<void> {
    if (this.process?.running) throw new Error(`ZooKeeper on port ${this.port} is already running`);
    this.process = await ChildServer.spawn(
      'ZooKeeper',
      'java',
      [
        '-Xmx128m',
        '-cp',
        ZOOKEEPER_JAR,
        'org.apache.zookeeper.server.quorum.QuorumPeerMain',
        path.join(this.dir, 'zoo.cfg'),
      ],
      // The JVM is up long before the server answers: ask it.
      { probe: async () => (await fourLetterWord(this.port, 'ruok').catch(() => '')) === 'imok' },
    );
  }

  protected async halt(mode: StopMode): Promise<void> {
    const child = this.process;
    this.process = undefined;
    await child?.stop(mode === 'graceful' ? 'SIGTERM' : 'SIGKILL');
  }
}

function fourLetterWord(port: number, word: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    let answer = '';
    socket.setTimeout(1_000, () => socket.destroy(new Error('timeout')));
    socket.on('connect', () => socket.write(word));
    socket.on('data', (chunk) => (answer += chunk.toString()));
    socket.on('end', () => resolve(answer));
    socket.on('error', reject);
  });
}
