import { describe, expect, it } from 'vitest';
import { type CriticalSection, findConcurrentEffectiveWriters } from '../support/lock-history.js';

const section = (owner: string, segment: number, start: number, end: number, effective = true): CriticalSection => ({
  owner,
  segment,
  fence: start,
  start,
  end,
  effective,
  pausedMs: 0,
});

describe('findConcurrentEffectiveWriters', () => {
  it('accepts holders one after the other, and overlaps where one write was refused or the segments differ', () => {
    const history = [
      section('a', 0, 0, 10),
      section('b', 0, 10, 20),
      section('c', 0, 12, 30, false),
      section('d', 1, 15, 25),
      section('e', 0, 21, 22),
    ];
    expect(findConcurrentEffectiveWriters(history)).toEqual({ count: 0, examples: [] });
  });

  it('reports every pair of effective sections on one segment that overlap, whatever the order they were recorded in', () => {
    const stale = section('stale', 2, 0, 100);
    const fresh = section('fresh', 2, 60, 70);
    const later = section('later', 2, 80, 110);
    const found = findConcurrentEffectiveWriters([later, fresh, stale]);
    expect(found.count).toBe(2);
    expect(found.examples.map((e) => [e.first.owner, e.second.owner])).toEqual([
      ['stale', 'fresh'],
      ['stale', 'later'],
    ]);
  });
});
