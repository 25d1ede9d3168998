import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createOwnDatabase, type OwnDatabase } from '../support/own-database.js';
import { type Answer, ID, readmeExamples, runReadmeExamples } from '../support/readme-examples.js';
import { ServiceProcess } from '../support/service.js';

/**
 * Every shell example of the README's "Try it", run in order against a fresh service (a database of its own), each
 * answer compared with the one shown beneath it (test/support/readme-examples.ts runs them). Order ids, times,
 * webhook secrets, and which segments an order took are masked. A line `[VAR=value …] npm start` (re)starts the
 * service with that environment, as the reader would; the service keeps its data across restarts.
 */

const TIME = /\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)/g;

/**
 * What may differ from run to run, masked: ids, times, secrets, a new webhook's cursor; of an order's deductions only their total; of a
 * SKU's segments only how many there are (an order takes a random one). Key order is kept: answers must match as
 * written, byte for byte.
 */
function masked(value: unknown, key = ''): unknown {
  // Where a new webhook starts: the feed's head as the event sequencer had it a moment before.
  if (key === 'deliveredThrough') return '<cursor>';
  if (typeof value === 'string') {
    return value
      .replace(ID, '<id>')
      .replace(TIME, '<time>')
      .replace(/whsec_\S+/, 'whsec_<secret>');
  }
  if (Array.isArray(value)) {
    if (key === 'deductions') return `<deductions of ${value.reduce((n, d) => n + d.quantity, 0)}>`;
    if (key === 'segmentStock') return `<${value.length} segments>`;
    return value.map((item) => masked(item));
  }
  if (value && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, masked(v, k)]));
  }
  return value;
}

function comparable(answer: Answer, shownHeaders: Iterable<string>) {
  const headers = [...shownHeaders].map((name) => {
    const value = answer.headers.get(name);
    // Seconds until a moment the reader chose: only that there are some.
    return `${name}: ${name === 'retry-after' && value ? value.replace(/^\d+$/, '<seconds>') : value}`;
  });
  return { status: answer.status, headers, body: JSON.stringify(masked(answer.body)) };
}

describe('the README', () => {
  let own: OwnDatabase;

  beforeAll(async () => {
    own = await createOwnDatabase('readme');
    expect((await own.migrator.migrateToLatest()).error).toBeUndefined();
  });
  afterAll(() => own?.drop());

  it('shows examples that the test can run', () => {
    expect(readmeExamples().length).toBeGreaterThan(20);
  });

  it('answers every example of "Try it" as shown, run in order from a fresh start', async () => {
    const start = (env: Record<string, string>) =>
      ServiceProcess.spawn({ DATABASE_URL: own.url, LOG_LEVEL: 'warn', ...env });
    await runReadmeExamples(start, ({ example, output, shown, got }) => {
      const where = `README.md line ${example.line}:\n${example.commands}`;
      expect.soft(got.length, `${where}\n${output}`).toBe(shown.length);
      shown.forEach((expected, i) => {
        if (!got[i]) return;
        const headers = expected.headers.keys();
        expect.soft(comparable(got[i], expected.headers.keys()), where).toEqual(comparable(expected, headers));
      });
    });
  }, 180_000);
});
