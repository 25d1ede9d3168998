import { readFileSync } from 'node:fs';
import http from 'node:http';
import { connect, type Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createOwnDatabase, type OwnDatabase } from '../support/own-database.js';
import { MetricsSnapshot } from '../support/scrape-metric.js';
import { call, ServiceProcess, startService, type RunningService } from '../support/service.js';
import { waitFor } from '../support/wait-for.js';

const ADMIN = 'stream-readers-admin-token';
const auth = { authorization: `Bearer ${ADMIN}` };
/** Padding of each event written: about 1.6 kB of SSE per event, so a few thousand make megabytes. */
const PADDING = 'x'.repeat(1_500);

/** The service's resident memory, in bytes, as the kernel counts it. */
function rss(pid: number): number {
  const line = /^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return Number(line![1]) * 1024;
}

/**
 * Appends `count` events of `sku` to the feed in one statement, as the sequencer would have placed them (positions
 * after the head, which moves with them). The streams read the feed, not how it was filled: this makes megabytes of
 * feed in milliseconds on a loaded machine, where placing as many orders would take minutes.
 */
async function appendEvents(own: OwnDatabase, sku: string, count: number): Promise<void> {
  await sql`
    with head as (
      update event_sequencer set last_position = last_position + ${count} where id = 1
      returning last_position - ${count} as start
    )
    insert into events (position, sku_id, sku, type, sequence, occurred_at, data)
    select start + g, 0, ${sku}, 'order.placed', start + g, now(),
           jsonb_build_object('available', 0, 'reserved', 0, 'sold', 0, 'padding', ${PADDING}::text)
    from head, generate_series(1, ${count}) g`.execute(own.db);
}

/** A GET of `path` on a raw connection that never reads a byte of the answer. */
function neverRead(url: string, path: string): Socket {
  const { hostname, port } = new URL(url);
  const socket = connect({ host: hostname, port: Number(port) });
  socket.on('error', () => {});
  socket.pause();
  socket.write(`GET ${path} HTTP/1.1\r\nHost: stock\r\nAuthorization: Bearer ${ADMIN}\r\n\r\n`);
  return socket;
}

/** A stream's answer, read as server-sent events, paused until `resume()`; `text` is what arrived so far. */
function openStream(url: string, path: string, headers: Record<string, string> = {}) {
  let text = '';
  let ended = false;
  let response: http.IncomingMessage | undefined;
  let reading = false;
  const request = http.get(`${url}${path}`, { agent: false, headers: { ...auth, ...headers } }, (res) => {
    response = res;
    if (!reading) res.pause();
    res.setEncoding('utf8');
    res.on('data', (chunk: string) => (text += chunk));
    res.on('end', () => (ended = true));
  });
  request.on('error', () => (ended = true));
  return {
    resume: () => {
      reading = true;
      response?.resume();
    },
    close: () => request.destroy(),
    /** How many events arrived so far (cheaper than `events()`). */
    count: () => text.split('\nid: ').length - (text.startsWith('id: ') ? 0 : 1),
    get ended() {
      return ended;
    },
    /** What arrived so far. */
    get text() {
      return text;
    },
    /** Each complete event: its id, its event type and data. */
    events() {
      return text
        .split('\n\n')
        .slice(0, -1)
        .filter((block) => block.startsWith('id: '))
        .map((block) => {
          const fields = Object.fromEntries(
            block.split('\n').map((line) => [line.split(': ')[0], line.slice(line.indexOf(': ') + 2)]),
          );
          return { id: fields.id!, type: fields.event!, data: JSON.parse(fields.data!) as Record<string, unknown> };
        });
    },
  };
}

describe('streams whose readers do not keep up', () => {
  let own: OwnDatabase;
  let svc: ServiceProcess;
  const metrics = () => MetricsSnapshot.scrape(`${svc.url}/metrics`, ADMIN);
  const lagClosures = async () => (await metrics()).byLabel('stock_stream_lag_closures_total', 'stream').events ?? 0;

  beforeAll(async () => {
    own = await createOwnDatabase('stream_readers');
    await own.migrator.migrateToLatest();
    // Its own database, so the feed holds only what the test writes; the audit would read the written events' books.
    svc = await ServiceProcess.spawn({
      DATABASE_URL: own.url,
      ADMIN_TOKEN: ADMIN,
      AUDIT_INTERVAL_MS: '0',
      LOG_LEVEL: 'warn',
      // V8 sizes its young generation (up to 3 × 16 MB) to the allocation rate and shrinks it when that falls, as much
      // with readers that read as with none; held to 1 MB semi-spaces, resident memory shows what the process keeps.
      NODE_OPTIONS: '--max-semi-space-size=1',
      ...(process.env.STREAM_TEST_BOUND ? { STREAM_MAX_BUFFERED_BYTES: process.env.STREAM_TEST_BOUND } : {}),
    });
  }, 90_000);
  afterAll(async () => {
    await svc?.stop();
    await own?.drop();
  });

  it('twenty streams that never read keep resident memory within 10 MB of where it started through 60 s of events', async () => {
    // "Where it started": after a first round of twenty such streams, run until they were closed (or 60 s, should
    // none be). Filling twenty sockets' kernel buffers (a few MB each on loopback) grows the allocator's arenas once,
    // bounded or not (measured); what must not grow is what the streams keep as the traffic goes on.
    const firstRound = Array.from({ length: 20 }, () => neverRead(svc.url, '/events/stream?after=0&sku=warmup'));
    await waitFor(
      async () => {
        await appendEvents(own, 'warmup', 50);
        return (await lagClosures()) >= 20;
      },
      60_000,
      250,
    );
    for (const socket of firstRound) socket.destroy();
    await sleep(2_000);
    const closedBefore = await lagClosures();
    const started = rss(svc.pid);

    const sockets = Array.from({ length: 20 }, () => neverRead(svc.url, '/events/stream?after=0&sku=traffic'));
    try {
      const open = async () => (await metrics()).byLabel('stock_streams_open', 'stream').events;
      expect(await waitFor(async () => (await open()) === 20, 10_000, 100)).not.toBe(Infinity);
      // 60 s of traffic: 25 events (about 40 kB) every 250 ms, 10 MB in all. Without a bound each of the twenty
      // streams would hold nearly all of it, less what the kernel's socket buffers take (a few MB on loopback).
      // Sampled every 250 ms. Writing into twenty sockets whose kernel buffers still fill makes transient peaks (the
      // allocator's, tens of MB for a few seconds, with or without a bound: measured), so what the streams keep is
      // read as the median of the last 20 s, by when every stream has either been closed or kept its backlog.
      const samples: { at: number; rss: number }[] = [];
      const until = performance.now() + 60_000;
      while (performance.now() < until) {
        await appendEvents(own, 'traffic', 25);
        samples.push({ at: performance.now(), rss: rss(svc.pid) });
        await sleep(250);
      }
      const late = samples.filter((s) => s.at >= until - 20_000).map((s) => s.rss - started);
      const kept = late.sort((x, y) => x - y)[Math.floor(late.length / 2)]!;
      const peak = Math.max(...samples.map((s) => s.rss)) - started;
      const mb = (bytes: number) => (bytes / 2 ** 20).toFixed(1);
      console.log(`resident memory ${mb(started)} MB; over the last 20 s +${mb(kept)} MB; peak +${mb(peak)} MB`);
      expect(kept).toBeLessThan(10 * 2 ** 20);
      // Bounded because each was closed once it had the bound unread, not because the traffic was small.
      expect((await lagClosures()) - closedBefore).toBe(20);
      expect(await waitFor(async () => (await open()) === 0, 15_000, 200)).not.toBe(Infinity);
    } finally {
      for (const socket of sockets) socket.destroy();
    }
  }, 240_000);

  it('closes a stream over its bound with the id to resume after, and the resumed stream loses no event', async () => {
    // About 5 MB: more than the kernel's buffers and the bound hold together.
    await appendEvents(own, 'resume', 3_000);
    const all = (
      await sql<{ position: string }>`select position from events where sku = 'resume' order by position`.execute(
        own.db,
      )
    ).rows.map((row) => String(row.position));
    const before = await lagClosures();
    const paused = openStream(svc.url, '/events/stream?after=0&sku=resume');
    expect(await waitFor(async () => (await lagClosures()) > before, 30_000, 200)).not.toBe(Infinity);
    // The reader comes back within the time a closed stream keeps its last bytes: it gets every event up to the close.
    paused.resume();
    expect(await waitFor(() => paused.ended, 10_000, 50)).not.toBe(Infinity);
    const first = paused.events();
    const closing = first.at(-1)!;
    expect(closing.type).toBe('stream.closed');
    expect(closing.data).toMatchObject({ reason: 'reader_behind', lastEventId: closing.id });
    const got = first.slice(0, -1).map((event) => event.id);
    expect(got).toEqual(all.slice(0, got.length));
    expect(closing.id).toBe(got.at(-1));
    expect(got.length).toBeLessThan(all.length);

    // As an EventSource does: back with the closing event's id as Last-Event-ID.
    const resumed = openStream(svc.url, '/events/stream?sku=resume', { 'last-event-id': closing.id });
    resumed.resume();
    expect(await waitFor(() => resumed.events().length >= all.length - got.length, 30_000, 50)).not.toBe(Infinity);
    resumed.close();
    expect([...got, ...resumed.events().map((event) => event.id)]).toEqual(all);
  }, 90_000);
});

describe('open streams per caller', () => {
  let svc: RunningService;
  beforeAll(async () => {
    svc = await startService({ ADMIN_TOKEN: ADMIN, STREAMS_PER_CALLER: '2' });
  });
  afterAll(() => svc?.stop());

  it('refuses a caller past STREAMS_PER_CALLER with 429 too_many_streams, and lets it open one once one closes', async () => {
    const scrape = () => MetricsSnapshot.scrape(`${svc.url}/metrics`, ADMIN);
    const refusals = async () => (await scrape()).sum('stock_stream_refusals_total');
    const before = await refusals();
    // A ticket stream counts against the same cap: a caller holding tickets cannot open one stream per ticket.
    const made = await call(svc.url, 'POST', '/skus', { sku: 'capped', stock: 5, segments: 1 }, auth);
    expect(made.status, JSON.stringify(made.body)).toBe(201);
    expect((await call(svc.url, 'PUT', '/skus/capped/line', { capacity: 5 }, auth)).status).toBe(200);
    const joined = await call(svc.url, 'POST', '/skus/capped/line', { customerId: 'reader' }, auth);
    const ticketStream = `/line-tickets/${(joined.body as { ticketId: string }).ticketId}/stream`;
    const streams = [
      openStream(svc.url, '/events/stream?sku=capped'),
      openStream(svc.url, `/dashboard/events?sku=capped`),
    ];
    const open = async () => (await scrape()).sum('stock_streams_open');
    expect(await waitFor(async () => (await open()) === 2, 10_000, 50)).not.toBe(Infinity);
    for (const path of ['/events/stream?sku=capped', '/dashboard/events?sku=capped', ticketStream]) {
      const refused = await call(svc.url, 'GET', path, undefined, auth);
      expect(refused.status, path).toBe(429);
      expect(refused.headers.get('content-type'), path).toMatch(/^application\/problem\+json/);
      expect(refused.body, path).toMatchObject({ code: 'too_many_streams', limit: 2 });
    }
    expect((await refusals()) - before).toBe(3);
    streams[0]!.close();
    expect(await waitFor(async () => (await open()) === 1, 10_000, 50)).not.toBe(Infinity);
    const again = openStream(svc.url, '/events/stream?sku=capped');
    expect(await waitFor(async () => (await open()) === 2, 10_000, 50)).not.toBe(Infinity);
    again.close();
    streams[1]!.close();
    expect(await waitFor(async () => (await open()) === 0, 10_000, 50)).not.toBe(Infinity);
    const ticket = openStream(svc.url, ticketStream);
    ticket.resume();
    expect(await waitFor(async () => ticket.text.includes('event: ticket'), 10_000, 50)).not.toBe(Infinity);
    expect(await open()).toBe(1);
    ticket.close();
  });
});
