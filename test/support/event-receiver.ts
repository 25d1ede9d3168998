import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Webhook } from 'standardwebhooks';

/** One request a receiver got: its headers, raw body, and whether its signature verified. */
export interface Received {
  id: string;
  timestamp: string;
  signature: string;
  body: string;
  verified: boolean;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- the event, asserted on by each test
  event: any;
}

/**
 * A local webhook receiver: records every request, checks its signature with the Standard Webhooks library, and
 * answers what `mode` says (200, 500, or — closed — nothing at all: the port refuses connections).
 */
export class EventReceiver {
  readonly received: Received[] = [];
  mode: 'ok' | 'fail' = 'ok';
  /** How long each answer takes. */
  delayMs = 0;
  secret: string | undefined;
  private server: Server | undefined;
  private port = 0;

  get url(): string {
    return `http://127.0.0.1:${this.port}/hook`;
  }

  async open(): Promise<void> {
    this.server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (chunk: Buffer) => chunks.push(chunk));
      req.on('end', () => {
        const body = Buffer.concat(chunks).toString('utf8');
        const headers = {
          'webhook-id': String(req.headers['webhook-id']),
          'webhook-timestamp': String(req.headers['webhook-timestamp']),
          'webhook-signature': String(req.headers['webhook-signature']),
        };
        let verified: boolean;
        try {
          new Webhook(this.secret!).verify(body, headers);
          verified = true;
        } catch {
          verified = false;
        }
        this.received.push({
          id: headers['webhook-id'],
          timestamp: headers['webhook-timestamp'],
          signature: headers['webhook-signature'],
          body,
          verified,
          event: JSON.parse(body),
        });
        const status = this.mode === 'ok' ? 200 : 500;
        setTimeout(() => res.writeHead(status).end(), this.delayMs);
      });
    });
    this.server.listen(this.port, '127.0.0.1');
    await once(this.server, 'listening');
    this.port = (this.server.address() as AddressInfo).port;
  }

  /** Stops listening: connections to the port are refused until `open` again (same port). */
  async close(): Promise<void> {
    const server = this.server;
    if (!server) return;
    this.server = undefined;
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}
