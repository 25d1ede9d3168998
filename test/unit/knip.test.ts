import { execFile } from 'node:child_process';
import { cpSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';

// `npm run lint` ends with knip (knip.json): no unused file, export or dependency. Shown on a copy of the tree with
// one export planted that nothing imports.
const run = promisify(execFile);
const root = path.resolve(import.meta.dirname, '../..');
const copy = mkdtempSync(path.join(tmpdir(), 'knip-'));
afterAll(() => rmSync(copy, { recursive: true, force: true }));

describe('the dead-code check', () => {
  it('is part of npm run lint', () => {
    const { scripts } = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')) as {
      scripts: Record<string, string>;
    };
    expect(scripts.lint).toMatch(/\bknip\b/);
  });

  it('fails on an unused export planted in the order path', async () => {
    for (const entry of ['src', 'loadtest', 'migrations', 'scripts', 'test']) {
      cpSync(path.join(root, entry), path.join(copy, entry), {
        recursive: true,
        filter: (source) => !/(^|\/)(results|\.data)(\/|$)/.test(path.relative(root, source)),
      });
    }
    for (const file of readdirSync(root, { withFileTypes: true })) {
      if (file.isFile()) cpSync(path.join(root, file.name), path.join(copy, file.name));
    }
    symlinkSync(path.join(root, 'node_modules'), path.join(copy, 'node_modules'));
    const planted = path.join(copy, 'src/orders/outcome.ts');
    writeFileSync(planted, `${readFileSync(planted, 'utf8')}\nexport const plantedUnusedExport = 1;\n`);

    const failure = await run(path.join(root, 'node_modules/.bin/knip'), ['--no-progress'], { cwd: copy }).then(
      () => undefined,
      (error: { code: number; stdout: string }) => error,
    );
    expect(failure?.code).toBe(1);
    expect(failure?.stdout).toMatch(/plantedUnusedExport\s+src\/orders\/outcome\.ts/);
    // Nothing else: the planted export is the whole finding.
    expect(failure?.stdout.match(/^\S.*\s+\S+\.(ts|js|mjs):\d+/gm)).toHaveLength(1);
  }, 120_000);
});
