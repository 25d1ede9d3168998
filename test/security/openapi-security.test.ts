import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RunningService, startService } from '../support/service.js';
import { serviceKey, writeKeysFile } from './credentials.js';

type Operation = { security?: Record<string, string[]>[] };

/**
 * The status a caller without a credential gets. A stream never ends: it is cut once its status is in. Any other
 * answer is read to its end, as a client does: one left unread holds its connection open, and stopping the service
 * then waits out SHUTDOWN_GRACE_MS for it.
 */
async function statusWithoutCredential(base: string, method: string, path: string): Promise<number> {
  const abort = new AbortController();
  const hasBody = ['POST', 'PUT', 'PATCH'].includes(method);
  const response = await fetch(base + path, {
    method,
    signal: abort.signal,
    ...(hasBody && { headers: { 'content-type': 'application/json' }, body: '{}' }),
  });
  if (response.headers.get('content-type')?.startsWith('text/event-stream')) abort.abort();
  else await response.arrayBuffer();
  return response.status;
}

/**
 * The API document's security says what the routes do: in each setting, an operation whose security the setting
 * leaves open (none listed; with ADMIN_TOKEN alone, also the empty requirement `{}`) answers a caller without a
 * credential something other than 401, and every other operation answers it 401.
 */
describe.each([
  { setting: 'ADMIN_TOKEN alone', env: () => ({ ADMIN_TOKEN: `oa-${randomUUID()}` }), optionalIsOpen: true },
  {
    setting: 'API_KEYS_FILE',
    env: () => ({ API_KEYS_FILE: writeKeysFile([serviceKey('ops', ['stock:admin'])]) }),
    optionalIsOpen: false,
  },
])('the API document’s security with $setting', ({ env, optionalIsOpen }) => {
  let svc: RunningService;
  beforeAll(async () => {
    svc = await startService(env());
  });
  afterAll(() => svc?.stop());

  it('matches what each route answers a caller without a credential', async () => {
    const document = (await (await fetch(`${svc.url}/openapi.json`)).json()) as {
      paths: Record<string, Record<string, Operation>>;
    };
    const mismatches: string[] = [];
    let checked = 0;
    for (const [template, operations] of Object.entries(document.paths)) {
      const path = template.replace('{sku}', 'no-such-sku').replace('{id}', randomUUID());
      for (const [method, operation] of Object.entries(operations)) {
        const security = operation.security;
        const open =
          security === undefined ||
          security.length === 0 ||
          (optionalIsOpen && security.some((r) => Object.keys(r).length === 0));
        const status = await statusWithoutCredential(svc.url, method.toUpperCase(), path);
        checked++;
        if (open === (status === 401)) {
          mismatches.push(
            `${method.toUpperCase()} ${template}: document says ${open ? 'open' : 'guarded'}, got ${status}`,
          );
        }
      }
    }
    expect(checked).toBeGreaterThan(25);
    expect(mismatches).toEqual([]);
  });
});
