import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { loadConfig } from '../../src/config.js';

/**
 * No Docker engine runs these files here, so this test holds them to what the service needs: the services, two app
 * replicas, the environment the app reads, and healthchecks that the start order waits for.
 */
const compose = parse(readFileSync('docker-compose.yml', 'utf8'));
const dockerfile = readFileSync('Dockerfile', 'utf8');
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- parsed YAML; the assertions below are the type check
const services = compose.services as Record<string, any>;

const commandText = (test: unknown) => (Array.isArray(test) ? test.join(' ') : String(test));

describe('docker-compose.yml', () => {
  it('has redis, postgres and the app, and nothing else', () => {
    expect(Object.keys(services).sort()).toEqual(['app', 'postgres', 'redis']);
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
    expect(env.REDIS_URL).toBe('redis://redis:6379');
    const db = new URL(env.DATABASE_URL);
    expect(db.hostname).toBe('postgres');
    expect(db.username).toBe(services.postgres.environment.POSTGRES_USER);
    expect(db.password).toBe(services.postgres.environment.POSTGRES_PASSWORD);
    expect(db.pathname).toBe(`/${services.postgres.environment.POSTGRES_DB}`);
    expect(env.HOST).toBe('0.0.0.0');
    // Required at `docker compose up`: without it the app would listen on its own loopback only.
    expect(env.ADMIN_TOKEN).toMatch(/^\$\{ADMIN_TOKEN:\?.+\}$/);
  });

  it('passes the service configuration check with that environment', () => {
    const env = { ...services.app.environment, ADMIN_TOKEN: 'a-token-of-sixteen-chars' };
    const config = loadConfig(env);
    expect(config.port).toBe(3000);
    expect(config.host).toBe('0.0.0.0');
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

  it('publishes the app on a port range, one port per replica', () => {
    const ports = services.app.ports as { target: number; published: string }[];
    expect(ports).toHaveLength(1);
    expect(ports[0]!.target).toBe(Number(services.app.environment.PORT));
    const [low, high] = ports[0]!.published.split('-').map(Number);
    expect(high! - low! + 1).toBeGreaterThanOrEqual(services.app.deploy.replicas);
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
