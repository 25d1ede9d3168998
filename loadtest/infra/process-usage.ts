/**
 * What the run's processes use, from /proc (Linux): the service's, Postgres's and the load generator's own CPU (this
 * process: autocannon and its per-answer bookkeeping), the service's peak memory.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';

/** Linux reports process CPU time in clock ticks of 1/100 s (USER_HZ) on every common platform. */
const TICKS_PER_SECOND = 100;

export const procAvailable = existsSync('/proc/stat');

/** The service's, Postgres's and the load generator's CPU during a round, in cores. */
export type CpuUsage = ReturnType<ReturnType<typeof meterCpu>>;

// Meters the CPU of the service's processes and of the run's own Postgres (its postmaster and the backends it forks)
// until the returned function is called.
export function meterCpu(servicePids: number[], postmaster: number | undefined) {
  const before = snapshot(servicePids, postmaster);
  return () => {
    const after = snapshot(servicePids, postmaster);
    const seconds = (after.at - before.at) / 1000;
    const cores = { service: 0, postgres: 0, client: 0 };
    // Ticks per process, so that one starting during the round counts in full; one that ended counts in its parent's
    // reaped children, less what it had used before the round.
    for (const [pid, { group, ticks }] of after.ticks)
      cores[group] += (ticks - (before.ticks.get(pid)?.ticks ?? 0)) / TICKS_PER_SECOND / seconds;
    for (const [pid, { group, ticks }] of before.ticks)
      if (!after.ticks.has(pid)) cores[group] -= ticks / TICKS_PER_SECOND / seconds;
    return { seconds, cores };
  };
}

function snapshot(servicePids: number[], postmaster: number | undefined) {
  const processes = readdirSync('/proc')
    .filter((entry) => /^\d+$/.test(entry))
    .flatMap((entry) => {
      try {
        const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
        // Fields after the parenthesised command name: state, ppid, …, utime (14th overall), stime, cutime, cstime.
        const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
        // With the children it reaped (cutime, cstime): a process that ended during a round, such as Postgres's
        // autovacuum workers, counts in its parent's group rather than as another process.
        const ticks = fields.slice(11, 15).reduce((sum, field) => sum + Number(field), 0);
        return [{ pid: Number(entry), ppid: Number(fields[1]), ticks }];
      } catch {
        return []; // The process ended while we looked.
      }
    });
  const ticks = new Map<number, { group: 'service' | 'postgres' | 'client'; ticks: number }>();
  for (const { pid, ppid, ticks: used } of processes)
    if (servicePids.includes(pid)) ticks.set(pid, { group: 'service', ticks: used });
    else if (pid === process.pid) ticks.set(pid, { group: 'client', ticks: used });
    else if (postmaster && (pid === postmaster || ppid === postmaster))
      ticks.set(pid, { group: 'postgres', ticks: used });
  return { at: performance.now(), ticks };
}

/** The largest peak resident memory (VmHWM, since start) of these processes; null where /proc cannot tell. */
export function peakMemory(pids: number[]) {
  const peaks = pids.flatMap((pid) => {
    try {
      const status = readFileSync(`/proc/${pid}/status`, 'utf8');
      return [Number(/^VmHWM:\s+(\d+) kB/m.exec(status)![1]) * 1024];
    } catch {
      return []; // The process is gone or /proc is unavailable.
    }
  });
  return peaks.length ? { peakRssBytes: Math.max(...peaks) } : null;
}
