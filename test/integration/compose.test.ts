import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { loadConfig } from '../../src/config.js';

/**
 * No Docker engine runs these files here, so this test holds them to what the service needs: the services, two app
 * replicas, the environment the app reads, and healthchecks that the start order waits for.
 */
const compose = parse(readFileSync('docker-compose.yml', 'utf8'), { merge: true });
const haproxy = readFileSync('deploy/haproxy.cfg', 'utf8');
/** deploy/redis-cluster.env: what `docker compose --env-file` sets for the cluster variant. */
const clusterEnv = Object.fromEntries(
  readFileSync('deploy/redis-cluster.env', 'utf8')
    .split('\n')
    .filter((line) => /^\w+=/.test(line))
    .map((line) => [line.slice(0, line.indexOf('=')), line.slice(line.indexOf('=') + 1)]),
);
const clusterNodes = [1, 2, 3, 4, 5, 6].map((n) => `redis-node-${n}`);

/** `!reset`, the Compose specification's removal of a value by an override file. */
const RESET = Symbol('!reset');
const readCompose = (file: string) =>
  parse(readFileSync(file, 'utf8'), { merge: true, customTags: [{ tag: '!reset', resolve: () => RESET }] });
const isMapping = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);
/**
 * Compose's merge of an override file into the model, as far as these files need it: mappings merge key by key, a
 * `!reset` key is removed, sequences append (without repeats), anything else is replaced.
 */
const mergeCompose = (base: unknown, override: unknown): unknown => {
  if (Array.isArray(base) && Array.isArray(override)) return [...new Set([...base, ...override])];
  if (!isMapping(base) || !isMapping(override)) return override;
  const merged: Record<string, unknown> = { ...base };
  for (const [key, value] of Object.entries(override)) {
    if (value === RESET) delete merged[key];
    else merged[key] = mergeCompose(merged[key], value);
  }
  return merged;
};
/** The services Compose enables with `profiles` active: those without profiles and those with an active one. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- parsed YAML
const enabledServices = (model: Record<string, any>, profiles: string[]) =>
  Object.keys(model)
    .filter((name) => !model[name].profiles || model[name].profiles.some((p: string) => profiles.includes(p)))
    .sort();
type Dependencies = Record<string, { required?: boolean }>;
/** `depends_on` in either syntax (a list of names, or names mapped to how) as the long one. */
const dependsOn = (value: unknown): Dependencies =>
  Array.isArray(value) ? Object.fromEntries(value.map((name: string) => [name, {}])) : ((value ?? {}) as Dependencies);
/** A dependency on a service left out is an error, unless it is declared `required: false`. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- parsed YAML
const missingDependencies = (model: Record<string, any>, enabled: string[]) =>
  enabled.flatMap((name) =>
    Object.entries(dependsOn(model[name].depends_on))
      .filter(([dependency, how]) => !enabled.includes(dependency) && how.required !== false)
      .map(([dependency]) => `${name} -> ${dependency}`),
  );

/** Compose's interpolation of `${NAME-default}` and `${NAME:-default}` from `env`, as `docker compose` does it. */
const interpolate = (value: string, env: Record<string, string>) =>
  value.replace(/\$\{(\w+)(:?)-([^}]*)\}/g, (_, name: string, colon: string, fallback: string) => {
    const set = env[name];
    return set === undefined || (colon && set === '') ? fallback : set;
  });
const dockerfile = readFileSync('Dockerfile', 'utf8');
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- parsed YAML; the assertions below are the type check
const services = compose.services as Record<string, any>;
/** The model `docker compose --env-file deploy/redis-cluster.env` loads: COMPOSE_FILE's files, merged in order. */
const clusterFiles = (clusterEnv.COMPOSE_FILE ?? 'docker-compose.yml').split(clusterEnv.COMPOSE_PATH_SEPARATOR ?? ':');
const clusterModel = clusterFiles
  .slice(1)
  .reduce<unknown>((model, file) => mergeCompose(model, readCompose(file)), compose);
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- parsed YAML
const clusterServices = (clusterModel as { services: Record<string, any> }).services;
const clusterProfiles = clusterEnv.COMPOSE_PROFILES!.split(',');

const commandText = (test: unknown) => (Array.isArray(test) ? test.join(' ') : String(test));

describe('docker-compose.yml', () => {
  it('has redis, postgres, the app and its balancer by default, and the Redis Cluster only in the cluster profile', () => {
    const byDefault = Object.keys(services).filter((name) => !services[name].profiles);
    expect(byDefault.sort()).toEqual(['app', 'balancer', 'postgres', 'redis']);
    const inCluster = Object.keys(services).filter((name) => services[name].profiles?.includes('cluster'));
    expect(inCluster.sort()).toEqual([...clusterNodes, 'redis-cluster-init'].sort());
  });

  it('starts the single Redis by default and not on the cluster, where nothing depends on it', () => {
    // No profile: exactly the default deployment, every dependency there (the cluster's, `required: false`, aside).
    const byDefault = enabledServices(services, []);
    expect(byDefault).toEqual(['app', 'balancer', 'postgres', 'redis']);
    expect(missingDependencies(services, byDefault)).toEqual([]);
    expect(services.app.depends_on.redis).toEqual({ condition: 'service_healthy' });
    // The cluster variant's env file: the profile on, and the override file that leaves the single Redis out.
    expect(clusterFiles).toEqual(['docker-compose.yml', 'deploy/redis-cluster.compose.yml']);
    expect(clusterProfiles).toEqual(['cluster']);
    const onCluster = enabledServices(clusterServices, clusterProfiles);
    expect(onCluster).toEqual(['app', 'balancer', 'postgres', ...clusterNodes, 'redis-cluster-init'].sort());
    expect(onCluster).not.toContain('redis');
    expect(Object.keys(clusterServices.app.depends_on).sort()).toEqual(['postgres', 'redis-cluster-init']);
    expect(missingDependencies(clusterServices, onCluster)).toEqual([]);
    // The override changes nothing else: the rest of the app and the cluster's services are docker-compose.yml's.
    expect(clusterServices.app.environment).toEqual(services.app.environment);
    for (const name of [...clusterNodes, 'redis-cluster-init']) expect(clusterServices[name]).toEqual(services[name]);
    // Still one published address for the service: the balancer's (Postgres' is on the loopback, for the host).
    const published = onCluster.filter((name) => clusterServices[name].ports);
    expect(published).toEqual(['balancer', 'postgres']);
  });

  it('runs Redis with the append-only file on a volume', () => {
    const redis = services.redis;
    expect(commandText(redis.command)).toMatch(/--appendonly yes/);
    expect(redis.volumes.some((v: string) => v.endsWith(':/data'))).toBe(true);
    expect(commandText(redis.healthcheck.test)).toMatch(/redis-cli ping/);
  });

  it('keeps Postgres data on a volume and checks it with pg_isready', () => {
    const postgres = services.postgres;
    expect(postgres.volumes.some((v: string) => v.endsWith(':/var/lib/postgresql/data'))).toBe(true);
    expect(commandText(postgres.healthcheck.test)).toMatch(/pg_isready -U stock -d stock/);
    expect(postgres.environment).toMatchObject({
      POSTGRES_USER: 'stock',
      POSTGRES_PASSWORD: 'stock',
      POSTGRES_DB: 'stock',
    });
  });

  it('declares every named volume it mounts', () => {
    const declared = Object.keys(compose.volumes ?? {});
    for (const service of Object.values(services)) {
      for (const volume of service.volumes ?? []) {
        const source = String(volume).split(':')[0]!;
        if (!source.startsWith('.') && !source.startsWith('/')) expect(declared).toContain(source);
      }
    }
  });

  it('runs two app replicas built from the Dockerfile', () => {
    expect(services.app.deploy.replicas).toBe(2);
    expect(services.app.build).toBe('.');
    expect(services.app.container_name).toBeUndefined();
  });

  it('gives the app the environment it needs, pointing at the compose services', () => {
    const env = services.app.environment;
    expect(interpolate(env.REDIS_URL, {})).toBe('redis://redis:6379');
    expect(interpolate(env.REDIS_CLUSTER_NODES, {})).toBe('');
    const db = new URL(env.DATABASE_URL);
    expect(db.hostname).toBe('postgres');
    expect(db.username).toBe(services.postgres.environment.POSTGRES_USER);
    expect(db.password).toBe(services.postgres.environment.POSTGRES_PASSWORD);
    expect(db.pathname).toBe(`/${services.postgres.environment.POSTGRES_DB}`);
    expect(env.HOST).toBe('0.0.0.0');
    // Required at `docker compose up`: without it the app would listen on its own loopback only.
    expect(env.ADMIN_TOKEN).toMatch(/^\$\{ADMIN_TOKEN:\?.+\}$/);
  });

  it('passes the service configuration check with that environment, on one Redis or on the cluster', () => {
    const withEnv = (shell: Record<string, string>) =>
      loadConfig({
        ...Object.fromEntries(
          Object.entries(services.app.environment as Record<string, string>).map(([k, v]) => [
            k,
            interpolate(v, shell),
          ]),
        ),
        ADMIN_TOKEN: 'a-token-of-sixteen-chars',
      });
    const single = withEnv({});
    expect(single.port).toBe(3000);
    expect(single.host).toBe('0.0.0.0');
    expect(single.redisUrl).toBe('redis://redis:6379');
    expect(single.redisClusterNodes).toEqual([]);
    const cluster = withEnv(clusterEnv);
    expect(cluster.redisUrl).toBeUndefined();
    expect(cluster.redisClusterNodes.length).toBeGreaterThan(0);
    for (const seed of cluster.redisClusterNodes) expect(clusterNodes).toContain(seed.split(':')[0]);
    expect(clusterEnv.COMPOSE_PROFILES).toBe('cluster');
  });

  it('forms the cluster from six nodes, 3 primaries with a replica each, before the app starts', () => {
    for (const name of clusterNodes) {
      const node = services[name];
      expect(commandText(node.command)).toMatch(/--cluster-enabled yes/);
      expect(commandText(node.command)).toMatch(/--cluster-preferred-endpoint-type hostname/);
      expect(node.environment.NODE).toBe(name);
      expect(node.volumes).toContain(`${name}:/data`);
      expect(node.healthcheck).toBeDefined();
    }
    const init = services['redis-cluster-init'];
    expect(commandText(init.command)).toMatch(/--cluster create[\s\S]*--cluster-replicas 1 --cluster-yes/);
    for (const name of clusterNodes) expect(init.depends_on[name].condition).toBe('service_healthy');
    expect(services.app.depends_on['redis-cluster-init']).toEqual({
      condition: 'service_completed_successfully',
      required: false,
    });
  });

  it('gives the cluster nodes, their checks, redis-cluster-init and the app the one REDIS_PASSWORD', () => {
    const password = '${REDIS_PASSWORD:-}';
    expect(compose['x-redis-auth']).toEqual({ REDIS_PASSWORD: password });
    expect(services.app.environment.REDIS_PASSWORD).toBe(password);
    expect(services['redis-cluster-init'].environment).toEqual({ REDIS_PASSWORD: password });
    // redis-cli reads REDISCLI_AUTH; set only when there is a password (a blank one would send AUTH "").
    const cliAuth = '[ -z "$$REDIS_PASSWORD" ] || export REDISCLI_AUTH="$$REDIS_PASSWORD";';
    expect(commandText(services['redis-cluster-init'].command)).toContain(cliAuth);
    for (const name of clusterNodes) {
      const node = services[name];
      expect(node.environment).toEqual({ REDIS_PASSWORD: password, NODE: name });
      // Required of clients and of the replication links, only when set.
      expect(commandText(node.command)).toContain(
        '$${REDIS_PASSWORD:+--requirepass "$$REDIS_PASSWORD" --masterauth "$$REDIS_PASSWORD"}',
      );
      expect(node.healthcheck.test[0]).toBe('CMD-SHELL');
      expect(commandText(node.healthcheck.test)).toContain(cliAuth);
      expect(commandText(node.healthcheck.test)).toMatch(/redis-cli ping \| grep -q PONG$/);
    }
    // No password written into the files themselves.
    const commands = Object.values(services).flatMap((service) => [
      commandText(service.command ?? ''),
      commandText(service.healthcheck?.test ?? ''),
    ]);
    for (const command of commands) {
      expect(command).not.toMatch(/--(requirepass|masterauth) (?!"\$\$REDIS_PASSWORD")|\bredis-cli\b.*\s(-a|--pass)\s/);
    }
    expect(clusterEnv.REDIS_PASSWORD).toBeUndefined();
    // The service reads it on the cluster, and none is none.
    const clusterConfig = (shell: Record<string, string>) =>
      loadConfig({
        ...Object.fromEntries(
          Object.entries(services.app.environment as Record<string, string>).map(([k, v]) => [
            k,
            interpolate(v, { ...clusterEnv, ...shell }),
          ]),
        ),
        ADMIN_TOKEN: 'a-token-of-sixteen-chars',
      });
    expect(clusterConfig({ REDIS_PASSWORD: 'a cluster secret' }).redisPassword).toBe('a cluster secret');
    expect(clusterConfig({}).redisPassword).toBeUndefined();
    expect(
      interpolate(services['redis-node-1'].environment.REDIS_PASSWORD, { REDIS_PASSWORD: 'a cluster secret' }),
    ).toBe('a cluster secret');
  });

  it('starts the app only once Redis and Postgres are healthy', () => {
    const dependsOn = services.app.depends_on;
    for (const name of ['redis', 'postgres']) {
      expect(dependsOn[name].condition).toBe('service_healthy');
      expect(services[name].healthcheck).toBeDefined();
    }
  });

  it('checks app health on /readyz, inside the container', () => {
    const test = services.app.healthcheck.test;
    expect(test[0]).toBe('CMD');
    expect(commandText(test)).toContain('http://127.0.0.1:3000/readyz');
  });

  it("publishes one port, the balancer's, and none of the replicas'", () => {
    const published = Object.entries(services).filter(([, service]) => service.ports);
    expect(published.map(([name]) => name).sort()).toEqual(['balancer', 'postgres', 'redis']);
    expect(services.balancer.ports).toEqual(['127.0.0.1:3000:8080']);
    expect(services.app.expose).toEqual([services.app.environment.PORT]);
    for (const name of ['redis', 'postgres'])
      for (const port of services[name].ports) expect(port).toMatch(/^127\.0\.0\.1:/);
  });

  it('balances over the replicas it resolves through Docker DNS, probing each on /readyz', () => {
    expect(services.balancer.image).toMatch(/^haproxy:/);
    expect(services.balancer.volumes).toContain('./deploy/haproxy.cfg:/usr/local/etc/haproxy/haproxy.cfg:ro');
    expect(haproxy).toMatch(/^\s*bind :8080$/m);
    expect(haproxy).toMatch(/^\s*nameserver \w+ 127\.0\.0\.11:53$/m);
    // One slot per possible replica, addresses from DNS, so replicas that come and go are seen without a reload.
    expect(haproxy).toMatch(new RegExp(`^\\s*server-template app \\d+ app:${services.app.environment.PORT}$`, 'm'));
    expect(haproxy).toMatch(/^\s*default-server .*\bcheck\b.*\bresolvers docker\b.*\binit-addr none\b/m);
    expect(haproxy).toMatch(/^\s*option httpchk GET \/readyz$/m);
    // An order is only resent when it never reached a replica.
    expect(haproxy).toMatch(/^\s*retry-on conn-failure empty-response$/m);
    expect(services.app.environment.TRUST_PROXY_HOPS).toBe('1');
    expect(commandText(services.balancer.healthcheck.test)).toContain('/balancer-health');
    expect(haproxy).toContain('if { path /balancer-health }');
  });

  it("checks the balancer's health with what the official haproxy image has: /bin/sh, printf, socat and grep", () => {
    const test = services.balancer.healthcheck.test as string[];
    // CMD-SHELL runs /bin/sh (dash, or busybox in -alpine); bash is in the Debian variant only, curl and wget in none.
    expect(test[0]).toBe('CMD-SHELL');
    expect(test).toHaveLength(2);
    const check = test[1]!;
    expect(check).not.toMatch(/\bbash\b|\/dev\/tcp|\bcurl\b|\bwget\b|\bnc\b/);
    expect(check).toMatch(
      /^printf 'GET \/balancer-health HTTP\/1\.0\\r\\n\\r\\n' \| socat -t 2 - TCP:([\d.]+):(\d+) \| grep -q /,
    );
    // On the port the frontend binds, which is the one the balancer publishes.
    const [, host, port] = /TCP:([\d.]+):(\d+)/.exec(check)!;
    expect(host).toBe('127.0.0.1');
    expect(haproxy).toMatch(new RegExp(`^\\s*bind :${port}$`, 'm'));
    expect(services.balancer.ports).toEqual([`127.0.0.1:3000:${port}`]);
    // A 200 status line, HTTP/1.0 or 1.1.
    expect(check).toMatch(/grep -q '\^HTTP\/1\[\.\]\[01\] 200 '$/);
  });

  it('gives the app longer to stop than its own drain grace period', () => {
    const seconds = Number(/^(\d+)s$/.exec(services.app.stop_grace_period)![1]);
    expect(seconds * 1000).toBeGreaterThan(loadConfig({}).shutdownGraceMs);
  });
});

describe('Dockerfile', () => {
  it('runs the compiled entry point directly, as a non-root user', () => {
    expect(dockerfile).toMatch(/^CMD \["node", "dist\/src\/main\.js"\]$/m);
    const users = [...dockerfile.matchAll(/^USER (\S+)$/gm)].map((m) => m[1]);
    expect(users.at(-1)).toBeDefined();
    expect(users.at(-1)).not.toBe('root');
  });

  it('builds with the dev dependencies and ships only the runtime ones', () => {
    expect(dockerfile).toMatch(/AS build[\s\S]*RUN npm ci --no-audit[\s\S]*RUN npm run build/);
    expect(dockerfile).toMatch(/npm ci --omit=dev/);
  });
});
