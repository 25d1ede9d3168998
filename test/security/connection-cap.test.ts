import { connect, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call, type RunningService, startService } from '../support/service.js';

const CAP = 4;

/** A connection to `port` from `localAddress` (any of 127.0.0.0/8 is this host's loopback: another client address). */
function open(port: number, localAddress: string): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: '127.0.0.1', port, localAddress }, () => resolve(socket));
    socket.once('error', reject);
  });
}

/**
 * Asks `/healthz` on the connection, kept alive: 'answered' when a 200 comes back, 'closed' when the server closes
 * the connection without an answer.
 */
function healthOn(socket: Socket): Promise<'answered' | 'closed'> {
  return new Promise((resolve) => {
    let answer = '';
    const onData = (chunk: Buffer) => {
      answer += chunk.toString('latin1');
      if (answer.startsWith('HTTP/1.1 200 ') && answer.includes('"ok"')) {
        socket.off('data', onData);
        resolve('answered');
      }
    };
    socket.on('data', onData);
    socket.on('error', () => {});
    socket.once('close', () => resolve('closed'));
    if (socket.writable) socket.write('GET /healthz HTTP/1.1\r\nHost: stock\r\n\r\n');
  });
}

describe('open connections per client address', () => {
  let svc: RunningService;
  let port: number;
  const sockets: Socket[] = [];
  beforeAll(async () => {
    svc = await startService({ MAX_CONNECTIONS_PER_ADDRESS: String(CAP) });
    port = Number(new URL(svc.url).port);
  });
  afterAll(async () => {
    for (const socket of sockets) socket.destroy();
    await svc?.stop();
  });

  it('closes the connections one address opens past the cap, serves its others and other addresses meanwhile', async () => {
    const held = await Promise.all(Array.from({ length: CAP }, () => open(port, '127.0.0.2')));
    sockets.push(...held);
    // Each answered once: the server has accepted and counted all of them.
    expect(await Promise.all(held.map(healthOn))).toEqual(Array(CAP).fill('answered'));

    const extra = await Promise.all(Array.from({ length: 3 }, () => open(port, '127.0.0.2')));
    sockets.push(...extra);
    expect(await Promise.all(extra.map(healthOn))).toEqual(['closed', 'closed', 'closed']);

    // Another address is not counted against the first; the first's own connections still serve.
    expect((await call(svc.url, 'GET', '/healthz')).status).toBe(200);
    const other = await open(port, '127.0.0.3');
    sockets.push(other);
    expect(await healthOn(other)).toBe('answered');
    expect(await healthOn(held[0]!)).toBe('answered');

    // A closed connection frees its place.
    held[1]!.destroy();
    await new Promise((resolve) => setTimeout(resolve, 200));
    const again = await open(port, '127.0.0.2');
    sockets.push(again);
    expect(await healthOn(again)).toBe('answered');
  });
});
