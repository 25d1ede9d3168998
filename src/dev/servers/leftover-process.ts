import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';

export class DataDirInUseError extends Error {}

/**
 * Deals with a server left running on a data directory (the service's: under DATA_DIR) by an earlier start. One whose
 * parent died (reparented to init: the service was killed) is stopped, so a new one can take its files; one whose
 * parent lives belongs to a running instance, and taking its files would corrupt them, so we refuse.
 */
export async function stopOrphanedServer(pidFile: string, processName: string): Promise<void> {
  const pid = readPid(pidFile);
  if (pid === undefined || !isProcess(pid, processName)) return;
  if (parentPid(pid) !== 1) {
    throw new DataDirInUseError(
      `${processName} (pid ${pid}) of another running instance uses ${pidFile}; stop it or choose another DATA_DIR`,
    );
  }
  process.kill(pid, 'SIGTERM');
  for (let i = 0; i < 200 && isProcess(pid, processName); i++) await sleep(50);
}

export function readPid(pidFile: string): number | undefined {
  try {
    const pid = Number(readFileSync(pidFile, 'utf8').split('\n')[0]!.trim());
    return Number.isInteger(pid) && pid > 0 ? pid : undefined;
  } catch {
    return undefined;
  }
}

export function isProcess(pid: number, name: string): boolean {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes(name);
  } catch {
    return false;
  }
}

function parentPid(pid: number): number | undefined {
  try {
    // Field 4 of /proc/<pid>/stat, counted after the parenthesised command name (which may contain spaces).
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
  } catch {
    return undefined;
  }
}
