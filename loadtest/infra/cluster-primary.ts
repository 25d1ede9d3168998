// CLUSTER_WORKERS instances of bench-main.js on PORT, their aggregated metrics on CLUSTER_METRICS_PORT; prints
// {"ready":true,"workers":[pid,…]} once every worker listens.
import cluster from 'node:cluster';
import { once } from 'node:events';
import { createServer } from 'node:http';
import { fileURLToPath } from 'node:url';
import { AggregatorRegistry } from 'prom-client';

const workerCount = Number(process.env.CLUSTER_WORKERS ?? 2);
cluster.setupPrimary({ exec: fileURLToPath(new URL('../bench/bench-main.js', import.meta.url)) });
const aggregator = new AggregatorRegistry();
const listening = new Set<number>();
let stopping = false;

cluster.on('listening', (worker) => {
  listening.add(worker.id);
  if (listening.size === workerCount)
    console.log(JSON.stringify({ ready: true, workers: workers.map((w) => w.process.pid) }));
});
cluster.on('exit', (worker, code, signal) => {
  if (stopping) return;
  console.error(`worker ${worker.process.pid} exited (code ${code}, signal ${signal}); stopping the cluster`);
  void stop(1);
});

const metricsServer = createServer((req, res) => {
  if (req.url !== '/metrics') return void res.writeHead(404).end();
  aggregator.clusterMetrics().then(
    (text) => res.writeHead(200, { 'content-type': aggregator.contentType }).end(text),
    (error: Error) => res.writeHead(500).end(error.message),
  );
});
metricsServer.listen(Number(process.env.CLUSTER_METRICS_PORT ?? 0), '127.0.0.1');
const workers = Array.from({ length: workerCount }, () => cluster.fork());

async function stop(exitCode: number): Promise<void> {
  if (stopping) return;
  stopping = true;
  metricsServer.close();
  // Each worker drains and releases its locks on SIGTERM, as a lone service does.
  await Promise.all(workers.filter((w) => !w.isDead()).map((w) => (w.process.kill('SIGTERM'), once(w, 'exit'))));
  process.exit(exitCode);
}
for (const signal of ['SIGTERM', 'SIGINT']) process.on(signal, () => void stop(0));
