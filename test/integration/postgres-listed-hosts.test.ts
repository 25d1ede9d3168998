import path from 'node:path';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDatabase, type Db, openOrderPath, runPrepared } from '../../src/db/database.js';
import { createClient } from '../../src/db/listed-hosts.js';
import { migrateToLatest } from '../../src/db/migrator.js';
import { createLogger } from '../../src/logger.js';
import { PgAutoFailoverFormation, type PgAutoctlNode, pgAutoFailoverMissing } from '../support/servers/index.js';
import { waitFor } from '../support/wait-for.js';

const missing = pgAutoFailoverMissing();
if (missing) console.warn(`[skip] multi-host DATABASE_URL against pg_auto_failover: ${missing}`);

/** The port of the server a query of each client kind ran on: Kysely's pool, the order path's, a single client. */
async function serverPorts(db: Db, url: string): Promise<number[]> {
  const viaKysely = await sql<{ port: number }>`select inet_server_port() as port`.execute(db);
  const viaOrderPath = await runPrepared<{ port: number }>(
    db,
    { name: 'listed_hosts_port', text: 'select inet_server_port() as port' },
    [],
  );
  const client = createClient(url, { connectionTimeoutMillis: 2_000 });
  await client.connect();
  try {
    const single = await client.query<{ port: number }>('select inet_server_port() as port');
    return [viaKysely.rows[0]!.port, viaOrderPath[0]!.port, single.rows[0]!.port];
  } finally {
    await client.end();
  }
}

describe.skipIf(missing)('a DATABASE_URL listing a primary and its standby (pg_auto_failover)', () => {
  let formation: PgAutoFailoverFormation;
  beforeAll(async () => {
    formation = await PgAutoFailoverFormation.start();
  }, 180_000);
  afterAll(() => formation?.destroy());

  it('with the standby listed first, writes only to the primary, and follows a switchover without a restart', async () => {
    const [primary, standby] = formation.nodes as [PgAutoctlNode, PgAutoctlNode];
    const url = formation.uri([standby, primary]);
    const db = createDatabase(url, 2, 2);
    try {
      await migrateToLatest(db, createLogger('warn'), path.resolve('dist/migrations'));
      await openOrderPath(db);
      expect(await serverPorts(db, url)).toEqual([primary.port, primary.port, primary.port]);
      await db.insertInto('admin_requests').values(row('before')).execute();

      await formation.switchover();
      // Connections to the old primary went with its restart as a standby; new ones find the promoted one.
      const followedMs = await waitFor(
        () =>
          serverPorts(db, url).then(
            (ports) => ports.every((port) => port === standby.port),
            () => false,
          ),
        30_000,
        200,
      );
      expect(followedMs).toBeLessThan(30_000);
      await db.insertInto('admin_requests').values(row('after')).execute();
      const keys = await db.selectFrom('admin_requests').select('idempotency_key').execute();
      expect(keys.map((k) => k.idempotency_key).sort()).toEqual(['after', 'before']);
    } finally {
      await db.destroy();
    }
  }, 180_000);

  it('with target_session_attrs=any takes the first host that answers, standby or not (libpq does the same)', async () => {
    const states = await formation.states();
    const standby = formation.nodes.find((node) => states.find((s) => s.name === node.name)?.reported === 'secondary')!;
    const others = formation.nodes.filter((node) => node !== standby);
    const url = formation.uri([standby, ...others]).replace('read-write', 'any');
    const client = createClient(url, { connectionTimeoutMillis: 2_000 });
    await client.connect();
    try {
      const { rows } = await client.query<{ port: number }>('select inet_server_port() as port');
      expect(rows[0]!.port).toBe(standby.port);
      await expect(client.query('create table listed_hosts_probe (id int)')).rejects.toMatchObject({ code: '25006' });
    } finally {
      await client.end();
    }
  }, 60_000);
});

function row(key: string) {
  return { idempotency_key: key, request_fingerprint: key, status: 200, response: JSON.stringify({}) };
}
