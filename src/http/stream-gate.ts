import type { Request, Response } from 'express';
import { AppError } from '../errors.js';
import type { StreamHooks, StreamKind } from '../metrics/stream-metrics.js';

export interface StreamBounds {
  /** Bytes written to one stream and not yet taken by its reader's connection, past which the stream is closed. */
  maxBufferedBytes: number;
  /** Streams one caller may hold open on this instance. */
  perCaller: number;
}

/**
 * How long a stream closed for lagging has to hand its last bytes to its reader before the connection is cut: a
 * reader that only paused gets every event up to the closing one; one that never reads holds the memory no longer.
 */
const LAGGING_FLUSH_MS = 10_000;

/**
 * Where the event, dashboard and ticket streams open: at most `perCaller` open streams per caller (the caller's
 * customer, service key or, without a credential, address), and every stream bounded in what it buffers for its
 * reader, so the memory streams take stays bounded however slowly, or whether at all, their readers read.
 */
export class StreamGate {
  private readonly openByCaller = new Map<string, number>();

  constructor(
    private readonly bounds: StreamBounds,
    private readonly hooks: StreamHooks,
    /** Who is calling, as the cap counts callers. */
    private readonly callerOf: (req: Request, res: Response) => string,
  ) {}

  /**
   * Starts `res` as a server-sent-event stream of `kind`; throws 429 `too_many_streams`, before anything is sent, when
   * its caller already holds `perCaller` streams open.
   */
  open(kind: StreamKind, req: Request, res: Response): StreamOutlet {
    const caller = this.callerOf(req, res);
    const held = this.openByCaller.get(caller) ?? 0;
    if (held >= this.bounds.perCaller) {
      this.hooks.refused(kind);
      throw new AppError(
        'too_many_streams',
        `this caller already holds ${held} open streams on this instance, the most it may (STREAMS_PER_CALLER); ` +
          'close one before opening another',
        { limit: this.bounds.perCaller },
      );
    }
    this.openByCaller.set(caller, held + 1);
    this.hooks.opened(kind);
    // Counted until the connection lets go of the response, a stream closed for lagging included.
    res.once('close', () => {
      const left = (this.openByCaller.get(caller) ?? 1) - 1;
      if (left > 0) this.openByCaller.set(caller, left);
      else this.openByCaller.delete(caller);
      this.hooks.ended(kind);
    });
    res.status(200).set({
      'Content-Type': 'text/event-stream',
      'Cache-Control': 'no-store',
      // Proxies must pass each event on at once, not buffer the stream.
      'X-Accel-Buffering': 'no',
    });
    res.flushHeaders();
    return new StreamOutlet(res, this.bounds.maxBufferedBytes, () => this.hooks.closedBehind(kind));
  }
}

/** One open stream: what is written to it, and its closing once its reader lags past the bound. */
export class StreamOutlet {
  private closed = false;

  constructor(
    private readonly res: Response,
    private readonly maxBufferedBytes: number,
    private readonly onClosedBehind: () => void,
  ) {}

  /** Whether events may still be written: neither ended nor closed for lagging, nor left by the reader. */
  get open(): boolean {
    return !this.closed && !this.res.writableEnded && !this.res.destroyed;
  }

  /**
   * Writes `text` (whole events); answers whether the stream is still open. Once the reader leaves more than the bound
   * unread, the stream ends with a `stream.closed` event whose `id:` is `resumeId`, the cursor the reader resumes
   * after (Last-Event-ID): the last event written, which the reader gets before the closing one.
   */
  send(text: string, resumeId?: string): boolean {
    if (!this.open) return false;
    this.res.write(text);
    if (this.res.writableLength <= this.maxBufferedBytes) return true;
    this.closeBehind(resumeId);
    return false;
  }

  /** Resolves once what was written has been handed to the connection, the stream has ended, or `ms` have passed. */
  drained(ms: number): Promise<void> {
    if (!this.open || !this.res.writableNeedDrain) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.res.off('drain', done).off('close', done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.res.once('drain', done).once('close', done);
    });
  }

  /** Ends the stream (shutdown, or its source is done). */
  end(): void {
    this.closed = true;
    if (!this.res.writableEnded) this.res.end();
  }

  private closeBehind(resumeId: string | undefined): void {
    this.closed = true;
    this.onClosedBehind();
    const data = { reason: 'reader_behind', maxBufferedBytes: this.maxBufferedBytes, lastEventId: resumeId };
    this.res.end(
      `${resumeId === undefined ? '' : `id: ${resumeId}\n`}event: stream.closed\ndata: ${JSON.stringify(data)}\n\n`,
    );
    const cut = setTimeout(() => this.res.destroy(), LAGGING_FLUSH_MS);
    this.res.once('finish', () => clearTimeout(cut)).once('close', () => clearTimeout(cut));
  }
}
