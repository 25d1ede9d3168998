import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';

/**
 * The shell examples of the README's "Try it", run in order as a reader would: a ```sh block followed by a ```json
 * block (one JSON value a line) or a plain block of `curl -i` answers (status line, the headers shown, `…` for the
 * others, then the body). A line `[VAR=value …] npm start` (re)starts the service with that environment. Ids the
 * service gave in place of the ones shown are learnt, so that later examples naming an id (an order read back,
 * confirmed, cancelled) name the one this run made, as the reader's would.
 */
const README = readFileSync('README.md', 'utf8');
const SHOWN_URL = 'http://127.0.0.1:3000';

export interface Example {
  line: number;
  commands: string;
  answer: string | undefined;
}

/** The ```sh blocks of "## Try it" (up to the next level-2 heading), each with the answer block right after it. */
export function readmeExamples(markdown = README): Example[] {
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

export type Answer = { status?: string; headers: Map<string, string>; body: unknown };

/** The answers in `text`: JSON values one after another, each after its status line and headers with `-i`. */
export function answers(text: string, shown: boolean): Answer[] {
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

export const ID = /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/g;

/** Pairs the ids of a shown answer with the ones the service gave in their place. */
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

/** A service the examples run against: `url` is where the reader's `curl` goes. */
export interface ReaderService {
  url: string;
  stop(): Promise<unknown>;
}

/** One example as run: what the shell printed, and the answers shown in the README and got. */
export interface ExampleRun {
  example: Example;
  output: string;
  shown: Answer[];
  got: Answer[];
}

/**
 * Runs every example of "Try it" in order, in one shell session across blocks (its variables are kept), in a
 * directory of its own where the examples' `node` finds the project's packages. `start(env)` starts the service, with
 * `{}` first and then with the environment of each `npm start` line (files the reader names resolved where the
 * reader's shell wrote them); the previous service is stopped first. It may answer undefined for a setting the
 * caller does not run: the examples up to the next `npm start` are then skipped. `checked` sees each example that
 * shows an answer.
 */
export async function runReadmeExamples(
  start: (env: Record<string, string>) => Promise<ReaderService | undefined>,
  checked: (run: ExampleRun) => void,
): Promise<void> {
  const workdir = mkdtempSync(path.join(tmpdir(), 'readme-'));
  symlinkSync(path.resolve('node_modules'), path.join(workdir, 'node_modules'));
  const state = path.join(workdir, '.example-state');
  let service: ReaderService | undefined;
  const restart = async (env: Record<string, string>) => {
    await service?.stop();
    service = undefined;
    const resolved = Object.entries(env).map(([k, v]) => [k, k.endsWith('_FILE') ? path.resolve(workdir, v) : v]);
    service = await start(Object.fromEntries(resolved));
    return service !== undefined;
  };
  // Not execFileSync: the caller may serve the reader's requests from this very process.
  const shell = async (lines: string): Promise<string> => {
    const script = `set -a; [ -f "${state}" ] && . "${state}"\n${lines}\nexport -p > "${state}"`;
    const { stdout } = await promisify(execFile)('bash', ['-c', script.replaceAll(SHOWN_URL, service!.url)], {
      cwd: workdir,
      encoding: 'utf8',
      env: { PATH: process.env.PATH, HOME: workdir },
      timeout: 30_000,
    });
    return stdout;
  };
  try {
    let running = await restart({});
    const ids = new Map<string, string>();
    for (const example of readmeExamples()) {
      let output = '';
      let pending: string[] = [];
      let commands = example.commands;
      for (const [shownId, id] of ids) commands = commands.replaceAll(shownId, id);
      for (const line of commands.split(/(?<!\\)\n/)) {
        const startLine = START.exec(line.trim());
        if (!startLine) {
          pending.push(line);
          continue;
        }
        if (pending.length > 0 && running) output += await shell(pending.join('\n'));
        pending = [];
        const env = Object.fromEntries(
          startLine[1]!
            .trim()
            .split(/\s+/)
            .filter(Boolean)
            .map((pair) => [pair.slice(0, pair.indexOf('=')), pair.slice(pair.indexOf('=') + 1)]),
        );
        running = await restart(env);
      }
      if (!running) continue;
      if (pending.length > 0) output += await shell(pending.join('\n'));
      if (example.answer === undefined) continue;
      const run = { example, output, shown: answers(example.answer, true), got: answers(output, false) };
      run.shown.forEach((shown, i) => run.got[i] && learnIds(shown.body, run.got[i].body, ids));
      checked(run);
    }
  } finally {
    await service?.stop();
    rmSync(workdir, { recursive: true, force: true });
  }
}
