import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createOwnDatabase, type OwnDatabase } from '../support/own-database.js';
import { ServiceProcess } from '../support/service.js';

/**
 * Every shell example of the README's "Try it", run in order against a fresh service (a database of its own), each
 * answer compared with the one shown beneath it: a ```sh block followed by a ```json block (one JSON value a line) or
 * a plain block of `curl -i` answers (status line, the headers shown, `…` for the others, then the body). Order ids,
 * times, webhook secrets, and which segments an order took are masked. A line `[VAR=value …] npm start` (re)starts
 * the service with that environment, as the reader would; the service keeps its data across restarts.
 */
const README = readFileSync('README.md', 'utf8');
const SHOWN_URL = 'http://127.0.0.1:3000';

interface Example {
  line: number;
  commands: string;
  answer: string | undefined;
}

/** The ```sh blocks of "## Try it" (up to the next level-2 heading), each with the answer block right after it. */
function examples(markdown: string): Example[] {
  const start = markdown.indexOf('\n## Try it\n');
  const end = markdown.indexOf('\n## ', start + 1);
  const section = markdown.slice(start, end);
  const firstLine = markdown.slice(0, start).split('\n').length;
  const found: Example[] = [];
  const block = /```sh\n([\s\S]*?)```\n(?:```(?:json)?\n([\s\S]*?)```\n)?/g;
  for (let match; (match = block.exec(section));) {
    found.push({
      line: firstLine + section.slice(0, match.index).split('\n').length,
      commands: match[1]!,
      answer: match[2],
    });
  }
  return found;
}

type Answer = { status?: string; headers: Map<string, string>; body: unknown };

/** The answers in `text`: JSON values one after another, each after its status line and headers with `-i`. */
function answers(text: string, shown: boolean): Answer[] {
  const found: Answer[] = [];
  let rest = text.replace(/\r/g, '');
  for (;;) {
    rest = rest.trimStart();
    if (!rest) return found;
    const answer: Answer = { headers: new Map(), body: undefined };
    if (rest.startsWith('HTTP/')) {
      // A shown answer lists some headers and then `…`; a real one all of them and then an empty line.
      const headEnd = shown ? rest.indexOf('…\n') : rest.indexOf('\n\n');
      const [status, ...headers] = rest.slice(0, headEnd).trim().split('\n');
      answer.status = status!.trim();
      for (const header of headers) {
        const colon = header.indexOf(':');
        answer.headers.set(header.slice(0, colon).toLowerCase(), header.slice(colon + 1).trim());
      }
      rest = rest.slice(headEnd + 2).trimStart();
    }
    const length = jsonLength(rest);
    answer.body = JSON.parse(rest.slice(0, length));
    rest = rest.slice(length);
    found.push(answer);
  }
}

/** The length of the JSON object or array at the start of `text`. */
function jsonLength(text: string): number {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (inString) {
      if (c === '\\') i++;
      else if (c === '"') inString = false;
    } else if (c === '"') inString = true;
    else if (c === '{' || c === '[') depth++;
    else if (c === '}' || c === ']') {
      if (--depth === 0) return i + 1;
    }
  }
  throw new Error(`not a JSON value: ${text.slice(0, 200)}`);
}

const ID = /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/g;
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

/**
 * Pairs the ids of a shown answer with the ones the service gave in their place, so that later examples which name
 * an id (an order read back, confirmed, cancelled) name the one this run made, as the reader's would.
 */
function learnIds(shown: unknown, got: unknown, ids: Map<string, string>): void {
  if (typeof shown === 'string' && typeof got === 'string') {
    const actual = got.match(ID) ?? [];
    (shown.match(ID) ?? []).forEach((id, i) => actual[i] && ids.set(id, actual[i]));
  } else if (shown && got && typeof shown === 'object' && typeof got === 'object') {
    for (const [key, value] of Object.entries(shown)) learnIds(value, (got as Record<string, unknown>)[key], ids);
  }
}

/** `[VAR=value …] npm start` lines: where the reader (re)starts the service. */
const START = /^((?:[A-Z_]+=\S+\s+)*)npm start$/;

describe('the README', () => {
  let own: OwnDatabase;
  let service: ServiceProcess | undefined;
  let workdir: string;
  const state = () => path.join(workdir, '.example-state');

  beforeAll(async () => {
    own = await createOwnDatabase('readme');
    expect((await own.migrator.migrateToLatest()).error).toBeUndefined();
    // The reader's shell: a directory of its own, where the examples' `node` finds the project's packages.
    workdir = mkdtempSync(path.join(tmpdir(), 'readme-'));
    symlinkSync(path.resolve('node_modules'), path.join(workdir, 'node_modules'));
    service = await start({});
  });
  afterAll(async () => {
    await service?.stop();
    await own?.drop();
    if (workdir) rmSync(workdir, { recursive: true, force: true });
  });

  async function start(env: Record<string, string>): Promise<ServiceProcess> {
    // Files the reader names are where the reader's shell wrote them.
    const resolved = Object.entries(env).map(([k, v]) => [k, k.endsWith('_FILE') ? path.resolve(workdir, v) : v]);
    return ServiceProcess.spawn({ DATABASE_URL: own.url, LOG_LEVEL: 'warn', ...Object.fromEntries(resolved) });
  }

  /** Runs shell lines as the reader would, in one shell session across blocks (its variables are kept). */
  function shell(lines: string): string {
    const script = `set -a; [ -f "${state()}" ] && . "${state()}"\n${lines}\nexport -p > "${state()}"`;
    return execFileSync('bash', ['-c', script.replaceAll(SHOWN_URL, service!.url)], {
      cwd: workdir,
      encoding: 'utf8',
      env: { PATH: process.env.PATH, HOME: workdir },
      timeout: 30_000,
    });
  }

  it('shows examples that the test can run', () => {
    expect(examples(README).length).toBeGreaterThan(20);
  });

  it('answers every example of "Try it" as shown, run in order from a fresh start', async () => {
    const ids = new Map<string, string>();
    for (const example of examples(README)) {
      let output = '';
      let pending: string[] = [];
      let commands = example.commands;
      for (const [shownId, id] of ids) commands = commands.replaceAll(shownId, id);
      for (const line of commands.split(/(?<!\\)\n/)) {
        const restart = START.exec(line.trim());
        if (!restart) {
          pending.push(line);
          continue;
        }
        if (pending.length > 0) output += shell(pending.join('\n'));
        pending = [];
        const env = Object.fromEntries(
          restart[1]!
            .trim()
            .split(/\s+/)
            .filter(Boolean)
            .map((pair) => [pair.slice(0, pair.indexOf('=')), pair.slice(pair.indexOf('=') + 1)]),
        );
        await service?.stop();
        service = undefined;
        service = await start(env);
      }
      if (pending.length > 0) output += shell(pending.join('\n'));
      if (example.answer === undefined) continue;

      const where = `README.md line ${example.line}:\n${example.commands}`;
      const shown = answers(example.answer, true);
      const got = answers(output, false);
      expect.soft(got.length, `${where}\n${output}`).toBe(shown.length);
      shown.forEach((expected, i) => {
        if (!got[i]) return;
        const headers = expected.headers.keys();
        expect.soft(comparable(got[i], expected.headers.keys()), where).toEqual(comparable(expected, headers));
        learnIds(expected.body, got[i].body, ids);
      });
    }
  }, 180_000);
});
