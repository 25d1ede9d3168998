import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';
import { createDatabase, runPrepared } from '../../src/db/database.js';
import { testEndpoints } from '../support/service.js';

/**
 * The order path's statements take their arrays as literals written by `arrayLiteral`: Postgres must read back exactly
 * the values given, whatever a client put in an Idempotency-Key or a customer id (quotes, backslashes, braces, commas,
 * the word NULL, spaces), and null as null. Both ways a hot-path statement runs: prepared on the order path's pool,
 * and inside a transaction.
 */
describe('array parameters of the order path', () => {
  const db = createDatabase(testEndpoints().databaseUrl, 2);
  afterAll(() => db.destroy());
  const echo = {
    name: 'test_echo_arrays',
    text: `select t, n, b from unnest($1::text[], $2::bigint[], $3::boolean[]) with ordinality as a(t, n, b, i)
            order by i`,
  };
  const roundTrip = async (rows: { t: string | null; n: number | null; b: boolean | null }[]) => {
    const parameters = [rows.map((r) => r.t), rows.map((r) => r.n), rows.map((r) => r.b)];
    type Row = { t: string | null; n: string | null; b: boolean | null };
    const read = (result: Row[]) => result.map((r) => ({ t: r.t, n: r.n === null ? null : Number(r.n), b: r.b }));
    const prepared = read(await runPrepared<Row>(db, echo, parameters));
    const inTransaction = read(await db.transaction().execute((trx) => runPrepared<Row>(trx, echo, parameters)));
    return { prepared, inTransaction };
  };

  it('reads back awkward strings, numbers, booleans and nulls as given', async () => {
    const rows = [
      { t: 'plain', n: 1, b: true },
      { t: 'with "quotes" and \\backslashes\\', n: -2, b: false },
      { t: '{braces},commas', n: 9_007_199_254_740_991, b: null },
      { t: 'NULL', n: null, b: true },
      { t: '', n: 0, b: false },
      { t: null, n: 3, b: true },
      { t: '  spaces  ', n: 4, b: true },
      { t: 'ümlaut ✓', n: 5, b: false },
    ];
    const { prepared, inTransaction } = await roundTrip(rows);
    expect(prepared).toEqual(rows);
    expect(inTransaction).toEqual(rows);
  });

  it('reads back any text, as an Idempotency-Key or a customer id may hold', async () => {
    // Mostly what array input treats specially, and any other character (Postgres text holds no NUL).
    const special = fc.constantFrom('"', '\\', '{', '}', ',', ' ', '\t', '\n', 'NULL', 'null', 'ü');
    const unit = fc.oneof(
      special,
      fc.string({ unit: 'binary', minLength: 1, maxLength: 1 }).filter((c) => c !== '\0'),
    );
    const row = fc.record({
      t: fc.option(fc.string({ unit, maxLength: 20 }), { nil: null }),
      n: fc.option(fc.integer(), { nil: null }),
      b: fc.option(fc.boolean(), { nil: null }),
    });
    await fc.assert(
      fc.asyncProperty(fc.array(row, { maxLength: 8 }), async (rows) => {
        expect((await roundTrip(rows)).prepared).toEqual(rows);
      }),
      { numRuns: 200 },
    );
  });
});
