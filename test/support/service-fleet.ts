import { setTimeout as sleep } from 'node:timers/promises';
import { ServiceProcess } from './service.js';

/**
 * Several service processes (`node dist/src/main.js`) on one Redis and one Postgres, as production runs them. The
 * fleet knows which members still take traffic; a load driver asks it for their addresses on every request.
 */
export class ServiceFleet {
  readonly members: ServiceProcess[] = [];
  private readonly outOfRotation = new Set<ServiceProcess>();

  constructor(private readonly env: Record<string, string>) {}

  /** Starts `count` members; `members[i]` is the one started with `envOf(i)`. */
  static async start(
    count: number,
    env: Record<string, string>,
    envOf: (index: number) => Record<string, string> = () => ({}),
  ) {
    const fleet = new ServiceFleet(env);
    const started = await Promise.allSettled(Array.from({ length: count }, (_, index) => fleet.spawn(envOf(index))));
    for (const result of started) if (result.status === 'fulfilled') fleet.members.push(result.value);
    const failed = started.find((result) => result.status === 'rejected');
    if (failed) {
      await fleet.stopAll();
      throw failed.reason;
    }
    return fleet;
  }

  async add(extraEnv: Record<string, string> = {}): Promise<ServiceProcess> {
    const member = await this.spawn(extraEnv);
    this.members.push(member);
    return member;
  }

  private spawn(extraEnv: Record<string, string>): Promise<ServiceProcess> {
    return ServiceProcess.spawn({ ...this.env, ...extraEnv });
  }

  /** Addresses of the members that take traffic. */
  urls(): string[] {
    return this.members.filter((m) => !this.outOfRotation.has(m) && isRunning(m)).map((m) => m.url);
  }

  /** Stops sending new requests to a member (a load balancer taking it out). */
  takeOutOfRotation(member: ServiceProcess): void {
    this.outOfRotation.add(member);
  }

  returnToRotation(member: ServiceProcess): void {
    this.outOfRotation.delete(member);
  }

  running(): ServiceProcess[] {
    return this.members.filter(isRunning);
  }

  /**
   * Milliseconds until every running member answers GET /readyz with 200, polling every 100 ms; Infinity if that
   * did not happen within `limitMs` (the caller asserts the bound).
   */
  async readyWithin(limitMs: number, members = this.running()): Promise<number> {
    const started = Date.now();
    const pending = new Set(members);
    while (pending.size > 0) {
      if (Date.now() - started > limitMs) return Infinity;
      await Promise.all(
        [...pending].map(async (member) => {
          if ((await probe(`${member.url}/readyz`)) === 200) pending.delete(member);
        }),
      );
      if (pending.size > 0) await sleep(100);
    }
    return Date.now() - started;
  }

  /** Every member's log lines, for post-mortems and for checking what the logs reveal. */
  logs(): string {
    return this.members.map((m, i) => `--- instance ${i} (pid ${m.child.pid})\n${m.output.join('\n')}`).join('\n');
  }

  async stopAll(): Promise<void> {
    await Promise.all(
      this.members.map(async (member) => {
        // A member left frozen by a failed test must be woken to hear SIGTERM.
        if (isRunning(member)) member.child.kill('SIGCONT');
        const stopped = member.stop('SIGTERM');
        const timer = setTimeout(() => member.child.kill('SIGKILL'), 15_000);
        await stopped.finally(() => clearTimeout(timer));
      }),
    );
  }
}

function isRunning(member: ServiceProcess): boolean {
  return member.child.exitCode === null && member.child.signalCode === null;
}

async function probe(url: string): Promise<number | undefined> {
  try {
    const response = await fetch(url, { signal: AbortSignal.timeout(2_000) });
    await response.arrayBuffer();
    return response.status;
  } catch {
    return undefined;
  }
}
