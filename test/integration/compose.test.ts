import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { loadConfig } from '../../src/config.js';
import { parseConnectionString } from '../../src/db/connection-string.js';

/**
 * No Docker engine runs these files here, so this test checks what can be checked without one: that the files hang
 * together. Every reference resolves (dependencies, volumes, the files mounted, the hosts in the app's URLs, the
 * override's services), every service waited on as healthy has a healthcheck, the app is given only variables the
 * service reads, and the ports line up from the balancer to the app. Compose's own merge and interpolation are not
 * re-implemented: the values are read as written.
 */
// `!reset` (the override file's removal of a value) is kept as a marker; `<<` merge keys are resolved.
const read = (file: string) =>
  parse(readFileSync(file, 'utf8'), { merge: true, customTags: [{ tag: '!reset', resolve: () => '!reset' }] });
const compose = read('docker-compose.yml');
const override = read('deploy/redis-cluster.compose.yml');
const postgresFailover = read('docker-compose.postgres-failover.yml');
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- parsed YAML; the assertions below are the type check
const services = compose.services as Record<string, any>;
const names = Object.keys(services);
const haproxy = readFileSync('deploy/haproxy.cfg', 'utf8');
const dockerfile = readFileSync('Dockerfile', 'utf8');
const clusterEnv = readFileSync('deploy/redis-cluster.env', 'utf8');
/** The variables README.md's configuration table documents: the ones the service reads. */
const documented = new Set([...readFileSync('README.md', 'utf8').matchAll(/^\| `([A-Z_]+)` \|/gm)].map((m) => m[1]));

type Dependency = { condition?: string; required?: boolean };
const dependsOn = (value: unknown): Record<string, Dependency> =>
  Array.isArray(value) ? Object.fromEntries(value.map((name: string) => [name, {}])) : ((value ?? {}) as never);
const text = (value: unknown) => (Array.isArray(value) ? value.join(' ') : String(value ?? ''));

describe('docker-compose.yml', () => {
  it('depends only on services it defines, and waits as healthy only on services with a healthcheck', () => {
    for (const [name, service] of Object.entries(services)) {
      for (const [dependency, how] of Object.entries(dependsOn(service.depends_on))) {
        expect(names, `${name} -> ${dependency}`).toContain(dependency);
        if (how.condition === 'service_healthy') expect(services[dependency].healthcheck, dependency).toBeDefined();
        // A dependency outside the default deployment must say it is optional there.
        if (services[dependency].profiles && !service.profiles) expect(how.required, dependency).toBe(false);
      }
    }
  });

  it('declares every named volume it mounts, and every file it mounts exists', () => {
    const declared = Object.keys(compose.volumes ?? {});
    for (const service of Object.values(services)) {
      for (const volume of service.volumes ?? []) {
        const source = String(volume).split(':')[0]!;
        if (source.startsWith('.')) expect(() => readFileSync(source), source).not.toThrow();
        else if (!source.startsWith('/')) expect(declared).toContain(source);
      }
    }
  });

  it('gives the app only variables the service reads, with URLs naming services of this file', () => {
    const env = services.app.environment as Record<string, string>;
    for (const key of Object.keys(env)) expect(documented, key).toContain(key);
    const hosts = [/redis:\/\/([\w-]+):/.exec(env.REDIS_URL!)?.[1], new URL(env.DATABASE_URL!).hostname];
    for (const host of hosts) expect(names).toContain(host);
    const db = new URL(env.DATABASE_URL!);
    expect(db.username).toBe(services.postgres.environment.POSTGRES_USER);
    expect(db.password).toBe(services.postgres.environment.POSTGRES_PASSWORD);
    expect(db.pathname).toBe(`/${services.postgres.environment.POSTGRES_DB}`);
    for (const line of clusterEnv.split('\n').filter((l) => /^[A-Z_]+=/.test(l) && !l.startsWith('COMPOSE_'))) {
      expect(documented, line).toContain(line.split('=')[0]);
    }
    for (const seed of /^REDIS_CLUSTER_NODES=(.*)$/m.exec(clusterEnv)![1]!.split(',')) {
      expect(names).toContain(seed.split(':')[0]);
    }
  });

  it('lines the ports up: balancer → HAProxy frontend; HAProxy backends → the app port; health probes on them', () => {
    const port = services.app.environment.PORT;
    expect(services.app.expose).toEqual([port]);
    expect(text(services.app.healthcheck.test)).toContain(`http://127.0.0.1:${port}/readyz`);
    expect(haproxy).toMatch(new RegExp(`^\\s*server-template app \\d+ app:${port}$`, 'm'));
    const frontend = /^\s*bind :(\d+)$/m.exec(haproxy)![1];
    expect(services.balancer.ports).toEqual([`127.0.0.1:3000:${frontend}`]);
    expect(text(services.balancer.healthcheck.test)).toContain(`TCP:127.0.0.1:${frontend}`);
    // Only the balancer is published beyond the loopback; no replica publishes a port.
    for (const [name, service] of Object.entries(services)) {
      for (const published of service.ports ?? []) expect(published, name).toMatch(/^127\.0\.0\.1:/);
    }
    expect(services.app.ports).toBeUndefined();
  });

  it('gives the app longer to stop than its own drain grace period', () => {
    const seconds = Number(/^(\d+)s$/.exec(services.app.stop_grace_period)![1]);
    expect(seconds * 1000).toBeGreaterThan(loadConfig({}).shutdownGraceMs);
  });

  it('the Redis Cluster override changes only services that exist, and removes only what is there', () => {
    for (const [name, changes] of Object.entries<Record<string, unknown>>(override.services)) {
      expect(names).toContain(name);
      for (const [key, value] of Object.entries(changes)) {
        if (key === 'depends_on') {
          for (const [dependency, how] of Object.entries(value as Record<string, unknown>)) {
            if (how === '!reset') expect(Object.keys(dependsOn(services[name].depends_on))).toContain(dependency);
          }
        }
      }
    }
    expect(/^COMPOSE_FILE=(.*)$/m.exec(clusterEnv)![1]).toBe('docker-compose.yml:deploy/redis-cluster.compose.yml');
  });
});

describe('docker-compose.postgres-failover.yml (the pg_auto_failover variant)', () => {
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- parsed YAML, as above
  const added = postgresFailover.services as Record<string, any>;
  const all = { ...services, ...added };
  const nodes = Object.keys(added).filter((name) => /^pg-node-\d+$/.test(name));
  const flag = (command: unknown, name: string) => new RegExp(`--${name} (\\S+)`).exec(text(command))?.[1];

  it('takes the single Postgres out, and the app waits only on services that exist, healthy ones with a check', () => {
    expect(added.postgres).toEqual({ profiles: ['single-postgres'] });
    expect(added.app.depends_on.postgres).toBe('!reset');
    for (const [name, service] of Object.entries(added)) {
      for (const [dependency, how] of Object.entries(dependsOn(service.depends_on))) {
        if ((how as unknown) === '!reset') continue;
        expect(Object.keys(all), `${name} -> ${dependency}`).toContain(dependency);
        if (how.condition === 'service_healthy') expect(all[dependency].healthcheck, dependency).toBeDefined();
      }
      for (const volume of service.volumes ?? []) {
        expect(Object.keys(postgresFailover.volumes)).toContain(String(volume).split(':')[0]);
      }
      for (const published of service.ports ?? []) expect(published, name).toMatch(/^127\.0\.0\.1:/);
    }
    expect(nodes.length).toBeGreaterThanOrEqual(2);
  });

  it("gives the app every node in one read-write URI, as the nodes' own database, user and port", () => {
    const url = added.app.environment.DATABASE_URL as string;
    expect(loadConfig({ DATABASE_URL: url }).databaseUrl).toBe(url);
    const target = parseConnectionString(url);
    expect(target.targetSessionAttrs).toBe('read-write');
    expect(target.hosts.map((h) => h.host).sort()).toEqual([...nodes].sort());
    for (const node of nodes) {
      const command = added[node].command;
      expect(flag(command, 'dbname')).toBe(target.client.database);
      expect(flag(command, 'username')).toBe(target.client.user);
      expect(target.hosts.find((h) => h.host === node)!.port).toBe(Number(flag(command, 'pgport')));
      expect(added[node].environment.NODE).toBe(node);
      // Every node registers with the monitor of this file.
      expect(new URL(flag(command, 'monitor')!).hostname).toBe('pg-monitor');
      expect(Number(new URL(flag(command, 'monitor')!).port)).toBe(Number(flag(added['pg-monitor'].command, 'pgport')));
    }
  });

  it('runs the monitor with the settings the failover tests measured', () => {
    const command = text(added['pg-monitor'].command);
    for (const setting of [
      'health_check_period = 1000',
      'node_considered_unhealthy_timeout = 3000',
      'primary_demote_timeout = 5000',
    ]) {
      expect(command).toContain(`pgautofailover.${setting}`);
    }
  });
});

describe('Dockerfile', () => {
  it('runs the entry point the build emits, as a non-root user, with only the runtime dependencies', () => {
    expect(dockerfile).toMatch(/^CMD \["node", "dist\/src\/main\.js"\]$/m);
    expect(JSON.parse(readFileSync('tsconfig.build.json', 'utf8')).include).toEqual(['src', 'migrations']);
    expect(dockerfile).toMatch(/AS build[\s\S]*RUN npm ci --no-audit[\s\S]*RUN npm run build/);
    expect(dockerfile).toMatch(/npm ci --omit=dev/);
    const users = [...dockerfile.matchAll(/^USER (\S+)$/gm)].map((m) => m[1]);
    expect(users.at(-1)).toMatch(/^(?!root$)\S+$/);
  });
});
