import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { type ErrorCode, errorCatalog } from '../../src/errors.js';
import { problemType } from '../../src/http/problem.js';

/** Rows of the first markdown table whose header starts with `| Code |`, as arrays of trimmed cells. */
function tableRows(markdown: string): string[][] {
  const lines = markdown.split('\n');
  const header = lines.findIndex((line) => /^\|\s*Code\s*\|/.test(line));
  if (header < 0) throw new Error('docs/errors.md has no "| Code |" table');
  const rows: string[][] = [];
  for (const line of lines.slice(header + 2)) {
    if (!line.startsWith('|')) break;
    rows.push(
      line
        .slice(1, line.lastIndexOf('|'))
        .split('|')
        .map((cell) => cell.trim()),
    );
  }
  return rows;
}

describe('docs/errors.md and errorCatalog', () => {
  const rows = tableRows(readFileSync('docs/errors.md', 'utf8'));
  const documented = new Map(
    rows.map(([code, status, title, when]) => [code!.replace(/^`|`$/g, ''), { status: Number(status), title, when }]),
  );

  it('list the same codes, each once', () => {
    expect(documented.size).toBe(rows.length);
    expect([...documented.keys()].sort()).toEqual(Object.keys(errorCatalog).sort());
  });

  it.each(Object.entries(errorCatalog))('agree on the status and title of %s', (code, { status, title }) => {
    expect(documented.get(code)).toMatchObject({ status, title });
  });

  it('say when each error happens', () => {
    for (const [code, { when }] of documented) expect(when, code).toMatch(/\w{3,}/);
  });

  it('describe the problem type as the code under one URN prefix', () => {
    expect(problemType('out_of_stock' as ErrorCode)).toBe('urn:segmented-stock:problem:out_of_stock');
    expect(readFileSync('docs/errors.md', 'utf8')).toContain('`urn:segmented-stock:problem:<code>`');
  });
});

describe('docs/api.yaml and errorCatalog', () => {
  const api = parse(readFileSync('docs/api.yaml', 'utf8'));

  it('enumerate the same problem codes', () => {
    const codes: string[] = api.components.schemas.Problem.properties.code.enum;
    expect([...codes].sort()).toEqual(Object.keys(errorCatalog).sort());
  });

  it('only document statuses the catalog can produce on error responses', () => {
    const statuses = new Set(Object.values(errorCatalog).map((e) => String(e.status)));
    // eslint-disable-next-line @typescript-eslint/no-explicit-any -- parsed YAML, walked by shape
    for (const [path, operations] of Object.entries<any>(api.paths)) {
      // eslint-disable-next-line @typescript-eslint/no-explicit-any -- as above
      for (const [method, operation] of Object.entries<any>(operations)) {
        for (const status of Object.keys(operation.responses ?? {})) {
          if (Number(status) >= 400) {
            expect(statuses, `${method.toUpperCase()} ${path} ${status}`).toContain(status);
          }
        }
      }
    }
  });
});
