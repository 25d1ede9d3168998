// A TCP proxy that holds every chunk DELAY_MS before passing it on, each way, in order: a network hop of that
// one-way latency in front of Redis or Postgres (this kernel has no netem). As a program: UPSTREAM=host:port
// DELAY_MS=d prints {"port":p} once it listens; startDelayProxy runs it as a process of its own, so that its timers
// do not wait on the load generator's event loop.
import { type ChildProcess, fork } from 'node:child_process';
import { once } from 'node:events';
import { connect, createServer, type Socket } from 'node:net';
import { fileURLToPath } from 'node:url';

/** A proxy process in front of `upstream`; `url(original)` is the original URL with the proxy's host and port. */
export async function startDelayProxy(upstream: { host: string; port: number }, delayMs: number) {
  const child = fork(fileURLToPath(import.meta.url), [], {
    env: { ...process.env, UPSTREAM: `${upstream.host}:${upstream.port}`, DELAY_MS: String(delayMs) },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const [message] = (await Promise.race([
    once(child, 'message'),
    once(child, 'exit').then(([code]) => Promise.reject(new Error(`delay proxy exited (code ${code})`))),
  ])) as [{ port: number }];
  const { port } = message;
  return {
    port,
    pid: child.pid!,
    url: (original: string) => Object.assign(new URL(original), { hostname: '127.0.0.1', port: String(port) }).href,
    stop: () => stopChild(child),
  };
}
export type DelayProxy = Awaited<ReturnType<typeof startDelayProxy>>;

async function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = once(child, 'exit');
  child.kill('SIGTERM');
  await exited;
}

/** Everything `from` sends reaches `to` `delayMs` later, in order; `from` pauses while `to` cannot take more. */
function delayed(from: Socket, to: Socket, delayMs: number): void {
  from.on('data', (chunk) => {
    // Timers of one duration fire in the order they were set: the chunks keep theirs.
    setTimeout(() => {
      if (to.destroyed) return;
      if (!to.write(chunk) && !from.isPaused()) {
        from.pause();
        to.once('drain', () => from.resume());
      }
    }, delayMs);
  });
  // The end and an error travel no faster than the data before them.
  from.on('end', () => setTimeout(() => to.end(), delayMs));
  from.on('error', () => setTimeout(() => to.destroy(), delayMs));
  from.on('close', () => setTimeout(() => to.destroy(), delayMs + 1));
}

function serve(upstream: string, delayMs: number): void {
  const [host, port] = [upstream.slice(0, upstream.lastIndexOf(':')), Number(upstream.split(':').pop())];
  const server = createServer((client) => {
    const server = connect(port, host);
    for (const socket of [client, server]) socket.setNoDelay(true);
    delayed(client, server, delayMs);
    delayed(server, client, delayMs);
  });
  server.listen(0, '127.0.0.1', () => {
    const address = server.address();
    process.send!({ port: typeof address === 'object' && address ? address.port : 0 });
  });
  // Stopped by its parent, or gone with it.
  process.on('SIGTERM', () => process.exit(0));
  process.on('disconnect', () => process.exit(0));
}

if (process.argv[1] === fileURLToPath(import.meta.url)) serve(process.env.UPSTREAM!, Number(process.env.DELAY_MS));
