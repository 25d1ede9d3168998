import { readdirSync, readFileSync } from 'node:fs';

/** Linux reports process CPU time in clock ticks of 1/100 s (USER_HZ) on every common platform. */
const TICKS_PER_SECOND = 100;

export type CpuGroup = 'service' | 'postgres' | 'redis' | 'load generator';

/** Who used the machine's CPUs during a round, in cores (CPU seconds per second). */
export interface CpuUsage {
  seconds: number;
  /** Share of all CPUs busy, whoever used them. */
  machineBusy: number;
  cores: Record<CpuGroup, number> & { others: number };
  /** How long the round waited beforehand for other processes to calm down (0 when it did not wait). */
  waitedForQuietSeconds?: number;
}

interface Snapshot {
  at: number;
  /** CPU ticks per process of a group, so that processes starting or ending during a round count correctly. */
  ticks: Map<number, { group: CpuGroup; ticks: number }>;
  machine: { busy: number; total: number };
}

/**
 * CPU accounting per process group from /proc, so that a case can say where its time went (and how much other
 * processes on a shared machine took). Groups: the service instances, Postgres (the postmaster and its backends),
 * Redis, and this process (the load generator).
 */
export class CpuMeter {
  constructor(
    private readonly servicePids: () => number[],
    /**
     * Strings that identify the run's own servers in /proc/<pid>/cmdline: the postmaster's data directory, and the
     * address of each redis-server (one, or every node of a cluster, whose CPU is summed as Redis's).
     */
    private readonly markers: { postgres?: string; redis?: string[] },
  ) {}

  static available(): boolean {
    try {
      readFileSync('/proc/stat');
      return true;
    } catch {
      return false;
    }
  }

  start(): () => CpuUsage {
    const before = this.snapshot();
    return () => {
      const after = this.snapshot();
      const seconds = (after.at - before.at) / 1000;
      const used = new Map<CpuGroup, number>();
      // A process that ended during the round is missing from `after`: its last ticks are lost (an undercount of
      // at most what it used since `before`); one that started counts in full.
      for (const [pid, { group, ticks }] of after.ticks) {
        used.set(group, (used.get(group) ?? 0) + ticks - (before.ticks.get(pid)?.ticks ?? 0));
      }
      const cores = (group: CpuGroup) => (used.get(group) ?? 0) / TICKS_PER_SECOND / seconds;
      const total = after.machine.total - before.machine.total;
      const machineBusy = total > 0 ? (after.machine.busy - before.machine.busy) / total : NaN;
      const cpuCount = readdirSync('/sys/devices/system/cpu').filter((d) => /^cpu\d+$/.test(d)).length || 1;
      const usage = {
        service: cores('service'),
        postgres: cores('postgres'),
        redis: cores('redis'),
        'load generator': cores('load generator'),
      };
      const ours = Object.values(usage).reduce((a, b) => a + b, 0);
      return { seconds, machineBusy, cores: { ...usage, others: Math.max(0, machineBusy * cpuCount - ours) } };
    };
  }

  private snapshot(): Snapshot {
    const servicePids = new Set(this.servicePids());
    const processes = readProcesses();
    const postmasters = new Set<number>();
    const ticks: Snapshot['ticks'] = new Map();
    const { postgres, redis } = this.markers;
    for (const p of processes) {
      if (postgres && p.cmdline.includes(postgres) && p.cmdline.includes('postgres')) postmasters.add(p.pid);
    }
    for (const p of processes) {
      const group: CpuGroup | undefined = servicePids.has(p.pid)
        ? 'service'
        : p.pid === process.pid
          ? 'load generator'
          : postmasters.has(p.pid) || postmasters.has(p.ppid)
            ? 'postgres'
            : redis && p.cmdline.startsWith('redis-server') && redis.some((address) => p.cmdline.includes(address))
              ? 'redis'
              : undefined;
      if (group) ticks.set(p.pid, { group, ticks: p.ticks });
    }
    return { at: performance.now(), ticks, machine: readMachine() };
  }
}

function readProcesses(): { pid: number; ppid: number; ticks: number; cmdline: string }[] {
  const out: { pid: number; ppid: number; ticks: number; cmdline: string }[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      // Fields after the parenthesised command name: state, ppid, …, utime (14th overall), stime (15th).
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      const cmdline = readFileSync(`/proc/${entry}/cmdline`, 'utf8').replace(/\0/g, ' ');
      out.push({
        pid: Number(entry),
        ppid: Number(fields[1]),
        ticks: Number(fields[11]) + Number(fields[12]),
        cmdline,
      });
    } catch {
      // The process ended while we looked.
    }
  }
  return out;
}

function readMachine(): { busy: number; total: number } {
  const [, ...values] = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/);
  const n = values.map(Number);
  const total = n.reduce((a, b) => a + b, 0);
  const idle = (n[3] ?? 0) + (n[4] ?? 0);
  return { busy: total - idle, total };
}
