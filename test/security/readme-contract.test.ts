import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import { createRequire } from 'node:module';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createOwnDatabase, type OwnDatabase } from '../support/own-database.js';
import { type ReaderService, runReadmeExamples } from '../support/readme-examples.js';
import { ServiceProcess } from '../support/service.js';
import { SpawnedService } from '../support/service-process.js';

/** The README's token for the ADMIN_TOKEN-only setting ("With only ADMIN_TOKEN set, …"). */
const ADMIN_TOKEN = 'change-me-to-a-long-secret';
const require = createRequire(import.meta.url);
/** Prism's command line (`prism` in node_modules/.bin), run by node as the other spawned processes are. */
const PRISM = require.resolve('@stoplight/prism-cli/dist/index.js');

/** What went through the proxy: each request, the status it got, and what Prism found wrong with either. */
interface Exchange {
  request: string;
  status: number;
  violations: { location: string[]; message: string }[];
  /** Whether the answer came through Prism (it adds its CORS headers to every answer it relays). */
  relayed: boolean;
}

/**
 * Whether the ADMIN_TOKEN-only setting asks a credential of this request, as the README's "Who may do what" says:
 * SKU writes, listing a customer's orders, cancelling a confirmed order, metrics and the dashboard's data, the event
 * feed and webhooks. Placing, reading an order or a SKU, confirming and cancelling a reservation stay open. Written
 * out here rather than read from the API document, which is what is under test.
 */
async function needsCredential(method: string, path: string, service: string): Promise<boolean> {
  if (path.startsWith('/skus')) return method !== 'GET';
  if (path === '/orders') return method === 'GET';
  const cancel = /^\/orders\/([^/]+)\/cancel$/.exec(path);
  if (cancel) {
    const order = await fetch(`${service}/orders/${cancel[1]}`);
    return order.ok && ((await order.json()) as { status: string }).status === 'confirmed';
  }
  return /^\/(events|webhooks|metrics|dashboard\/)/.test(path);
}

/**
 * An HTTP hop between the reader's `curl` and Prism: adds the admin token to a request that the setting asks one of
 * and that carries none (as the operator running the examples would), relays the rest as it is, and records Prism's
 * `sl-violations` header of every answer, which lists each request and response violation, errors and warnings alike
 * (an undeclared status or an unknown route are only warnings, and Prism relays the answer either way).
 */
async function startHop(prism: string, service: string, exchanges: Exchange[]): Promise<Server> {
  const hop = createServer((request: IncomingMessage, reply: ServerResponse) => {
    void (async () => {
      const chunks: Buffer[] = [];
      for await (const chunk of request) chunks.push(chunk as Buffer);
      const body = chunks.length > 0 ? Buffer.concat(chunks) : undefined;
      const headers: Record<string, string> = {};
      for (const [name, value] of Object.entries(request.headers)) {
        if (typeof value === 'string' && !['host', 'connection', 'content-length'].includes(name))
          headers[name] = value;
      }
      const path = new URL(request.url!, 'http://hop').pathname;
      if (!headers.authorization && (await needsCredential(request.method!, path, service)))
        headers.authorization = `Bearer ${ADMIN_TOKEN}`;
      const answer = await fetch(prism + request.url, { method: request.method!, headers, body });
      const violations = answer.headers.get('sl-violations');
      exchanges.push({
        request: `${request.method} ${request.url}`,
        status: answer.status,
        violations: violations ? (JSON.parse(violations) as Exchange['violations']) : [],
        relayed: answer.headers.has('access-control-allow-credentials'),
      });
      const relayed: Record<string, string> = {};
      answer.headers.forEach((value, name) => {
        if (!['content-length', 'content-encoding', 'transfer-encoding', 'connection'].includes(name))
          relayed[name] = value;
      });
      reply.writeHead(answer.status, relayed).end(Buffer.from(await answer.arrayBuffer()));
    })().catch((error: Error) => reply.writeHead(502).end(error.message));
  });
  hop.listen(0, '127.0.0.1');
  await once(hop, 'listening');
  return hop;
}

/**
 * A validating proxy over the served API document reports nothing for the README's examples in the ADMIN_TOKEN-only
 * setting: Prism (`prism proxy <GET /openapi.json> <service>`) checks every request the examples send (the security
 * each operation lists, parameters, bodies) and every answer the service gives (status, media type, body schema, headers)
 * against the document the service serves. The examples of "Try it" run in order as the README shows them, with the
 * service in the ADMIN_TOKEN-only setting throughout; the examples written for the key file and customer tokens
 * (another setting) are skipped.
 */
describe('the README’s examples through a validating proxy, with ADMIN_TOKEN alone', () => {
  let own: OwnDatabase;
  const exchanges: Exchange[] = [];

  beforeAll(async () => {
    own = await createOwnDatabase('contract');
    expect((await own.migrator.migrateToLatest()).error).toBeUndefined();
  });
  afterAll(() => own?.drop());

  /** The service with ADMIN_TOKEN alone, Prism over its served document, and the hop in front; none for another setting. */
  async function start(env: Record<string, string>): Promise<ReaderService | undefined> {
    if (Object.keys(env).some((name) => name !== 'ADMIN_TOKEN')) return undefined;
    const service = await ServiceProcess.spawn({ DATABASE_URL: own.url, LOG_LEVEL: 'warn', ADMIN_TOKEN });
    const prism = await SpawnedService.start(
      PRISM,
      {},
      { args: (port) => ['proxy', `${service.url}/openapi.json`, service.url, '-p', String(port), '-h', '127.0.0.1'] },
    ).catch(async (error: unknown) => {
      await service.stop();
      throw error;
    });
    const hop = await startHop(prism.url, service.url, exchanges);
    return {
      url: `http://127.0.0.1:${(hop.address() as AddressInfo).port}`,
      stop: async () => {
        hop.closeAllConnections();
        await new Promise((resolve) => hop.close(resolve));
        await prism.stop();
        await service.stop();
      },
    };
  }

  it('finds no request or response violation, and no example refused for want of a credential', async () => {
    await runReadmeExamples(start, () => {});

    expect(exchanges.length).toBeGreaterThan(30);
    expect(exchanges.filter((e) => !e.relayed)).toEqual([]);
    const found = (side: 'request' | 'response') =>
      exchanges
        .map((e) => ({ ...e, violations: e.violations.filter((v) => v.location[0] === side).map((v) => v.message) }))
        .filter((e) => e.violations.length > 0)
        .map((e) => `${e.request} → ${e.status}: ${e.violations.join('; ')}`);
    expect(found('response')).toEqual([]);
    // One example sends bad input on purpose (a fractional quantity): the document refuses it as the service does.
    // Any other request the document finds wrong (a credential it asks for and the setting does not) is a violation.
    expect(found('request')).toEqual([
      'POST /orders → 400: Request body property quantity must be integer; ' +
        "Request body must have required property 'items'; Request body must NOT have additional properties; " +
        "found 'sku'; Request body must NOT have additional properties; found 'quantity'; " +
        'Request body must match a schema in anyOf',
    ]);
    // A request the setting serves without a credential, refused all the same, would be no violation (401 is
    // declared): no example expects a refusal here, or a failure.
    expect(exchanges.filter((e) => e.status === 401 || e.status === 403 || e.status >= 500)).toEqual([]);
  }, 240_000);
});
