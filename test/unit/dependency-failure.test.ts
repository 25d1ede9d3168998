import { describe, expect, it } from 'vitest';
import { isDependencyFailure } from '../../src/errors.js';
import { LockLostError, LockUnavailableError } from '../../src/lock/errors.js';

describe('isDependencyFailure: outages answer 503, bugs 500', () => {
  it('recognises store outages', () => {
    expect(isDependencyFailure(new LockUnavailableError('k', 'no quorum'))).toBe(true);
    expect(isDependencyFailure(Object.assign(new Error('x'), { code: 'ECONNREFUSED' }))).toBe(true);
    expect(isDependencyFailure(Object.assign(new Error('terminating connection'), { code: '57P01' }))).toBe(true);
    expect(isDependencyFailure(new Error('Connection terminated unexpectedly'))).toBe(true);
    const zookeeperLoss = Object.assign(new Error('Exception: CONNECTION_LOSS[-4]'), {
      name: 'CONNECTION_LOSS',
      code: -4,
    });
    expect(isDependencyFailure(zookeeperLoss)).toBe(true);
  });

  it('does not excuse programming errors', () => {
    expect(isDependencyFailure(new TypeError("Cannot read properties of undefined (reading 'x')"))).toBe(false);
    expect(isDependencyFailure(new LockLostError('k', 'expired'))).toBe(false);
    expect(isDependencyFailure('not an error')).toBe(false);
  });
});
