/**
 * The fence guard: the one condition under which a lock holder's write reaches a `stock_segments` row. Every writer
 * names the row `s` and its write `w`, whose `fence` is the holder's fencing token. Tokens on a row only rise, so a
 * holder whose lease ran out, and whose segment a newer holder has written since, writes nothing.
 */
export const FENCE_GUARD = 's.fence_token < w.fence';

/**
 * The guard of a write that stores a value computed from its read (the order batch's stock less what it took): the
 * row must also be unchanged since that read, still carrying `w.fence_seen`, the token read with the stock.
 */
export const FENCE_GUARD_SINCE_READ = `s.fence_token = w.fence_seen and ${FENCE_GUARD}`;
