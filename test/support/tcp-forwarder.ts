import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import { createConnection, createServer, type Server, type Socket } from 'node:net';

interface Link {
  client: Socket;
  upstream: Socket;
  /** Bytes that arrived while frozen, per direction: held back, never delivered unless thawed. */
  heldToUpstream: Buffer[];
  heldToClient: Buffer[];
}

/**
 * A loopback TCP forwarder standing in for what sits between a client and a server in production: a virtual IP that
 * a failover moves (`switchTo`), or a network link that can partition (`freeze`). Clients connect to `port`; bytes
 * go to the current target.
 */
export class TcpForwarder {
  private readonly links = new Set<Link>();
  private frozen = false;

  private constructor(
    private readonly server: Server,
    private targetPort: number,
  ) {
    server.on('connection', (client) => this.accept(client));
  }

  static async start(targetPort: number): Promise<TcpForwarder> {
    const server = createServer();
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    return new TcpForwarder(server, targetPort);
  }

  get port(): number {
    return (this.server.address() as AddressInfo).port;
  }

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  get target(): number {
    return this.targetPort;
  }

  /** Points the address at another server, as a failover moves a virtual IP: open connections are cut. */
  switchTo(targetPort: number): void {
    this.targetPort = targetPort;
    this.cutAll();
  }

  /** A silent partition: connections stay open, but nothing gets through in either direction. */
  freeze(): void {
    this.frozen = true;
  }

  thaw(): void {
    this.frozen = false;
    for (const link of this.links) {
      for (const chunk of link.heldToUpstream.splice(0)) link.upstream.write(chunk);
      for (const chunk of link.heldToClient.splice(0)) link.client.write(chunk);
    }
  }

  /** Closes every open connection; whatever was held back by a freeze is lost. */
  cutAll(): void {
    for (const link of this.links) {
      link.client.destroy();
      link.upstream.destroy();
    }
    this.links.clear();
    this.frozen = false;
  }

  async close(): Promise<void> {
    this.cutAll();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private accept(client: Socket): void {
    const upstream = createConnection({ host: '127.0.0.1', port: this.targetPort });
    const link: Link = { client, upstream, heldToUpstream: [], heldToClient: [] };
    this.links.add(link);
    const relay = (from: Socket, to: Socket, held: Buffer[]) => {
      from.on('data', (chunk: Buffer) => {
        if (this.frozen) held.push(chunk);
        else to.write(chunk);
      });
    };
    relay(client, upstream, link.heldToUpstream);
    relay(upstream, client, link.heldToClient);
    const teardown = () => {
      this.links.delete(link);
      client.destroy();
      upstream.destroy();
    };
    for (const socket of [client, upstream]) {
      socket.on('error', teardown);
      socket.on('close', teardown);
    }
  }
}
