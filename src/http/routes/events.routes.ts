import { setTimeout as sleep } from 'node:timers/promises';
import { type Request, type RequestHandler, type Response, Router } from 'express';
import type { Db } from '../../db/database.js';
import { methodNotAllowed } from '../method-not-allowed.js';
import { parseOr400 } from '../validate.js';
import { readEvents } from '../../events/feed.repository.js';
import { eventCursor, eventStreamQuery, eventsQuery } from '../event-schemas.js';
import type { StreamGate, StreamOutlet } from '../stream-gate.js';

/** Events a stream reads per query while catching up. */
const STREAM_PAGE = 500;
/** A comment line this often keeps proxies from closing an idle stream. */
const HEARTBEAT_MS = 15_000;
/**
 * How long a page waits, in all, for its reader to take what was written before the rest is written anyway: a reader
 * taking events as fast as they come is never handed a burst, one that stopped reading fills its bound in seconds.
 */
const READER_PATIENCE_MS = 1_000;

/**
 * `GET /events`: a page of the feed after a cursor; `GET /events/stream`: the same as server-sent events, each
 * event's `id:` its cursor, so a reconnecting client's `Last-Event-ID` resumes right after the last event it got.
 */
export function eventRoutes(db: Db, streams: EventStreams, requireRead: RequestHandler): Router {
  const router = Router();

  router
    .route('/')
    .get(requireRead, async (req, res) => {
      const query = parseOr400(eventsQuery, req.query, 'query');
      const events = await readEvents(db, { ...query, after: Number(query.after ?? 0) });
      // A full page may have more behind it; a short one reached the end of what is sequenced now.
      const nextCursor = events.length === query.limit ? events.at(-1)!.id : null;
      res.json({ events, nextCursor });
    })
    .all(methodNotAllowed('GET'));

  router
    .route('/stream')
    .get(requireRead, async (req, res) => {
      const query = parseOr400(eventStreamQuery, req.query, 'query');
      const lastEventId = req.get('last-event-id');
      const after = lastEventId !== undefined ? parseOr400(eventCursor, lastEventId, 'Last-Event-ID') : query.after;
      await streams.serve(req, res, { ...query, after: Number(after ?? 0) });
    })
    .all(methodNotAllowed('GET'));

  return router;
}

/**
 * The open event streams of this instance: each polls the feed after its own cursor; all end on shutdown. A stream
 * writes as fast as its reader takes (waiting up to READER_PATIENCE_MS a page), and one whose reader lags past the
 * gate's bound is closed with the id to resume after (../stream-gate.ts).
 */
export class EventStreams {
  private readonly open = new Set<StreamOutlet>();

  constructor(
    private readonly db: Db,
    /** How often a stream that caught up looks for new events. */
    private readonly pollMs: number,
    private readonly gate: StreamGate,
  ) {}

  async serve(
    req: Request,
    res: Response,
    filter: { after: number; sku?: string | undefined; types?: Parameters<typeof readEvents>[1]['types'] },
  ): Promise<void> {
    const outlet = this.gate.open('events', req, res);
    this.open.add(outlet);
    const gone = new AbortController();
    req.on('close', () => gone.abort());
    res.on('close', () => gone.abort());
    /** The last event written: where the reader resumes, should the stream close. */
    let after = filter.after;
    let quietSince = Date.now();
    try {
      while (!gone.signal.aborted && outlet.open) {
        const events = await readEvents(this.db, { ...filter, after, limit: STREAM_PAGE }).catch(() => []);
        const patience = performance.now() + READER_PATIENCE_MS;
        for (const event of events) {
          const text = `id: ${event.id}\nevent: ${event.type}\ndata: ${JSON.stringify(event)}\n\n`;
          if (!outlet.send(text, event.id)) break;
          after = Number(event.id);
          const wait = patience - performance.now();
          if (wait > 0) await outlet.drained(wait);
        }
        if (!outlet.open) break;
        if (events.length > 0) {
          quietSince = Date.now();
          if (events.length === STREAM_PAGE) continue;
        } else if (Date.now() - quietSince >= HEARTBEAT_MS) {
          outlet.send(': still here\n\n', String(after));
          quietSince = Date.now();
        }
        await sleep(this.pollMs, undefined, { signal: gone.signal }).catch(() => undefined);
      }
    } finally {
      this.open.delete(outlet);
      outlet.end();
    }
  }

  /** Ends every stream, so that shutdown does not wait for consumers to leave. */
  close(): void {
    for (const outlet of this.open) outlet.end();
    this.open.clear();
  }
}
