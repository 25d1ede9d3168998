import type { Server } from 'node:http';

/**
 * At most `max` open connections from one peer address (MAX_CONNECTIONS_PER_ADDRESS, docs/operations.md#slow-clients):
 * a connection past the cap is closed as soon as it is accepted, before anything is read from it. One client opening
 * connections by the thousand then cannot take every file descriptor and socket buffer of the process from the
 * others, whatever its requests. `0` turns the cap off: behind a load balancer every connection comes from the
 * balancer's address. Counting is one map entry per address with open connections, on the 'connection' event Node
 * emits anyway.
 */
export function capConnectionsPerAddress(server: Server, max: number): void {
  if (max === 0) return;
  const open = new Map<string, number>();
  server.on('connection', (socket) => {
    // A socket already closed by its peer has no address left; it needs no counting.
    const address = socket.remoteAddress;
    if (address === undefined) return;
    const count = (open.get(address) ?? 0) + 1;
    if (count > max) {
      socket.destroy();
      return;
    }
    open.set(address, count);
    socket.once('close', () => {
      const left = open.get(address)! - 1;
      if (left === 0) open.delete(address);
      else open.set(address, left);
    });
  });
}
