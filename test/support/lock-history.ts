/**
 * A recorded critical section: one lock holder's read-decide-write of one segment. Times are milliseconds on one
 * monotonic clock (performance.now() of the recording process), taken so that they under-state the section:
 * `start` after the read had returned (the read happened before it), `end` before the commit was sent (the commit
 * happened after it).
 */
export interface CriticalSection {
  owner: string;
  segment: number;
  fence: number;
  start: number;
  end: number;
  /** Whether its write took effect (false: refused by the guard and rolled back). */
  effective: boolean;
  /** Injected pause between read and write, 0 when none. */
  pausedMs: number;
}

export interface ConcurrentWriters {
  segment: number;
  first: CriticalSection;
  second: CriticalSection;
}

/**
 * Pairs of sections on one segment that both took effect and overlapped in time. Because the recorded intervals
 * under-state the real ones, an overlap here is certain: each read happened before the other's commit, so whichever
 * committed second wrote a value decided on stock that the first had already changed — a lost update. A correct
 * guard lets at most one of such a pair take effect, so with it this finds nothing.
 */
export function findConcurrentEffectiveWriters(
  history: readonly CriticalSection[],
  keepExamples = 10,
): { count: number; examples: ConcurrentWriters[] } {
  const bySegment = new Map<number, CriticalSection[]>();
  for (const section of history) {
    if (!section.effective) continue;
    const list = bySegment.get(section.segment) ?? [];
    list.push(section);
    bySegment.set(section.segment, list);
  }
  let count = 0;
  const examples: ConcurrentWriters[] = [];
  for (const [segment, sections] of bySegment) {
    sections.sort((a, b) => a.start - b.start);
    // Sections that started earlier and have not ended before the current one starts.
    let open: CriticalSection[] = [];
    for (const current of sections) {
      open = open.filter((earlier) => earlier.end > current.start);
      for (const earlier of open) {
        count++;
        if (examples.length < keepExamples) examples.push({ segment, first: earlier, second: current });
      }
      open.push(current);
    }
  }
  return { count, examples };
}
