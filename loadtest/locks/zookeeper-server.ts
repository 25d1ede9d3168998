import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { freePort } from '../../src/dev/free-port.js';

/** Debian's `zookeeper` package puts the server here; ZOOKEEPER_JAR overrides it. */
const ZOOKEEPER_JAR = process.env.ZOOKEEPER_JAR ?? '/usr/share/java/zookeeper.jar';

/** Why ZooKeeper cannot be started here, or undefined when it can. */
export function zookeeperMissing(): string | undefined {
  if (!existsSync(ZOOKEEPER_JAR)) return `${ZOOKEEPER_JAR} not found (apt-get install zookeeper)`;
  if (spawnSync('java', ['-version']).error) return 'java not found on PATH (apt-get install zookeeper brings one)';
  return undefined;
}

/**
 * A private standalone ZooKeeper server (the lock benchmark's and the tests'): the Debian package's jar on a free
 * loopback port, data in a throwaway directory, stoppable (SIGKILL) and restartable on the same port with its data.
 */
export class ZooKeeperServer {
  private child: ChildProcess | undefined;

  private constructor(
    readonly port: number,
    private readonly dir: string,
  ) {}

  static async start(): Promise<ZooKeeperServer> {
    const missing = zookeeperMissing();
    if (missing) throw new Error(`cannot start ZooKeeper: ${missing}`);
    const dir = mkdtempSync(path.join(tmpdir(), 'stock-zk-'));
    const zk = new ZooKeeperServer(await freePort(), dir);
    mkdirSync(path.join(dir, 'data'));
    writeFileSync(
      path.join(dir, 'zoo.cfg'),
      [
        // Short ticks: sessions of a few hundred ms are allowed, so expiry tests stay quick.
        'tickTime=200',
        `dataDir=${path.join(dir, 'data')}`,
        `clientPort=${zk.port}`,
        'clientPortAddress=127.0.0.1',
        'minSessionTimeout=400',
        'maxSessionTimeout=60000',
        'admin.enableServer=false',
        '4lw.commands.whitelist=ruok',
        'forceSync=no',
      ].join('\n'),
    );
    await zk.resume();
    return zk;
  }

  get connect(): string {
    return `127.0.0.1:${this.port}`;
  }

  /** Starts (again) on the same port with the same data. */
  async resume(): Promise<void> {
    const child = spawn(
      'java',
      [
        '-Xmx128m',
        '-cp',
        ZOOKEEPER_JAR,
        'org.apache.zookeeper.server.quorum.QuorumPeerMain',
        path.join(this.dir, 'zoo.cfg'),
      ],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    );
    this.child = child;
    let stderr = '';
    child.stderr!.on('data', (chunk: Buffer) => (stderr = (stderr + chunk.toString()).slice(-2000)));
    const deadline = Date.now() + 60_000;
    while (Date.now() < deadline) {
      if (child.exitCode !== null) throw new Error(`ZooKeeper exited (${child.exitCode}): ${stderr}`);
      if ((await fourLetterWord(this.port, 'ruok').catch(() => '')) === 'imok') return;
      await sleep(100);
    }
    await this.stop();
    throw new Error(`ZooKeeper did not answer within 60 s: ${stderr}`);
  }

  async stop(): Promise<void> {
    const child = this.child;
    this.child = undefined;
    if (!child || child.exitCode !== null) return;
    const exited = once(child, 'exit');
    child.kill('SIGKILL');
    await exited;
  }

  async destroy(): Promise<void> {
    await this.stop();
    rmSync(this.dir, { recursive: true, force: true });
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
