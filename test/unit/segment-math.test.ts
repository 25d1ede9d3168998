import { describe, expect, it } from 'vitest';
import { splitAcross, splitEvenly } from '../../src/inventory/segment-math.js';

describe('splitEvenly', () => {
  it('gives the first total % parts shares one more', () => {
    expect(splitEvenly(1000, 20)).toEqual(Array(20).fill(50));
    expect(splitEvenly(10, 4)).toEqual([3, 3, 2, 2]);
    expect(splitEvenly(3, 5)).toEqual([1, 1, 1, 0, 0]);
    expect(splitEvenly(0, 3)).toEqual([0, 0, 0]);
  });

  it('conserves the total and keeps shares within one of each other', () => {
    for (const [total, parts] of [
      [1e12, 1024],
      [7, 7],
      [1, 1024],
      [999_999_999_999, 13],
    ] as const) {
      const shares = splitEvenly(total, parts);
      expect(shares).toHaveLength(parts);
      expect(shares.reduce((a, b) => a + b, 0)).toBe(total);
      expect(Math.max(...shares) - Math.min(...shares)).toBeLessThanOrEqual(1);
    }
  });

  it('rejects impossible inputs', () => {
    expect(() => splitEvenly(-1, 2)).toThrow(new RangeError('total must be a safe integer ≥ 0, got -1'));
    expect(() => splitEvenly(5, 0)).toThrow(new RangeError('parts must be an integer ≥ 1, got 0'));
    expect(splitEvenly(5, 1)).toEqual([5]);
    expect(() => splitEvenly(1.5, 2)).toThrow(RangeError);
  });
});

describe('splitAcross', () => {
  it('takes what each segment has, in the given order, until the quantity is met', () => {
    const stock = [
      { segment: 1, available: 2 },
      { segment: 4, available: 5 },
    ];
    expect(splitAcross(stock, 6)).toEqual([
      { segment: 1, quantity: 2 },
      { segment: 4, quantity: 4 },
    ]);
    expect(splitAcross(stock, 8)).toBeNull();
  });

  it('takes nothing from an empty segment, and stops once the quantity is met', () => {
    const stock = [
      { segment: 0, available: 0 },
      { segment: 1, available: 3 },
      { segment: 2, available: -1 },
    ];
    expect(splitAcross(stock, 2)).toEqual([{ segment: 1, quantity: 2 }]);
  });
});
