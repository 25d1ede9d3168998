import { connect } from 'node:net';
import { performance } from 'node:perf_hooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call, type RunningService, startService } from '../support/service.js';

/** The documented bounds (docs/operations.md#slow-clients), plus the server's one-second check of its connections. */
const HEADERS_BOUND_MS = 10_000 + 1_000;
const REQUEST_BOUND_MS = 15_000 + 1_000;
/** Timers on a shared machine fire late by up to this much. */
const SLACK_MS = 1_500;

/**
 * Sends `head` and then `trickle` one byte every `everyMs`, never finishing; resolves when the server closes the
 * connection, with how long it stayed open and what the server answered.
 */
function trickle(port: number, head: string, trickleBytes: string, everyMs: number) {
  return new Promise<{ openMs: number; answer: string }>((resolve) => {
    const started = performance.now();
    const socket = connect({ host: '127.0.0.1', port });
    let answer = '';
    let sent = 0;
    let timer: NodeJS.Timeout | undefined;
    socket.on('connect', () => {
      socket.write(head);
      timer = setInterval(() => {
        if (sent < trickleBytes.length && socket.writable) socket.write(trickleBytes[sent++]!);
      }, everyMs);
    });
    socket.on('data', (chunk: Buffer) => (answer += chunk.toString('latin1')));
    socket.on('error', () => {});
    socket.on('close', () => {
      clearInterval(timer);
      resolve({ openMs: performance.now() - started, answer });
    });
  });
}

describe('slow clients', () => {
  let svc: RunningService;
  let port: number;
  beforeAll(async () => {
    svc = await startService();
    port = Number(new URL(svc.url).port);
  });
  afterAll(() => svc?.stop());

  it('cuts a request trickling its body, and one trickling its headers, within the bounds; /healthz stays fast', async () => {
    const body = '{"sku": "trickled", "quantity": 1}'.padEnd(4_000, ' ');
    const bodyHead =
      'POST /orders HTTP/1.1\r\nHost: stock\r\nContent-Type: application/json\r\n' +
      `Content-Length: ${body.length}\r\n\r\n`;
    const headers = 'POST /orders HTTP/1.1\r\nHost: stock\r\nX-Padding: ' + 'x'.repeat(4_000);
    // A handful of each, byte by byte every 200 ms: far from done when their bounds come.
    const slow = [
      ...Array.from({ length: 5 }, () => trickle(port, bodyHead, body, 200).then((r) => ({ ...r, kind: 'body' }))),
      ...Array.from({ length: 5 }, () => trickle(port, '', headers, 200).then((r) => ({ ...r, kind: 'headers' }))),
    ];
    let done = false;
    const health: number[] = [];
    const probing = (async () => {
      while (!done) {
        const started = performance.now();
        expect((await call(svc.url, 'GET', '/healthz')).status).toBe(200);
        health.push(performance.now() - started);
        await new Promise((resolve) => setTimeout(resolve, 250));
      }
    })();
    const cut = await Promise.all(slow);
    done = true;
    await probing;

    for (const { kind, openMs, answer } of cut) {
      const bound = kind === 'body' ? REQUEST_BOUND_MS : HEADERS_BOUND_MS;
      expect(openMs, kind).toBeLessThan(bound + SLACK_MS);
      expect(answer, kind).toMatch(/^HTTP\/1\.1 408 /);
    }
    expect(health.length).toBeGreaterThan(20);
    expect(Math.max(...health)).toBeLessThan(1_000);
  }, 40_000);
});
