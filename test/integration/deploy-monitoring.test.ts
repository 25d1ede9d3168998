import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { EventReceiver } from '../support/event-receiver.js';
import { createOwnDatabase, type OwnDatabase } from '../support/own-database.js';
import { call, type RunningService, startService, uniqueSku } from '../support/service.js';
import { waitFor } from '../support/wait-for.js';

// The monitoring files of deploy/: Prometheus's alert rules (checked and unit-tested with promtool, from Debian's
// prometheus package) and the Grafana dashboard; every metric they name must be one the service exports.

interface Rule {
  alert: string;
  expr: string;
  annotations: Record<string, string>;
}
const rules: Rule[] = parse(readFileSync('deploy/prometheus-rules.yml', 'utf8')).groups.flatMap(
  (group: { rules: Rule[] }) => group.rules,
);
interface Panel {
  title: string;
  datasource: { uid: string };
  targets: { expr: string; datasource: { uid: string } }[];
}
const dashboard = JSON.parse(readFileSync('deploy/grafana-dashboard.json', 'utf8'));
const panels: Panel[] = dashboard.panels;

/** The service's metric names an expression uses (Prometheus's own `up` aside). */
const metricsIn = (expr: string) => [...expr.matchAll(/\bstock_[a-z0-9_]+/g)].map(([name]) => name);

/** GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens. */
const anchorOf = (heading: string) =>
  heading
    .toLowerCase()
    .replace(/[^\p{L}\p{N} _-]/gu, '')
    .replace(/ /g, '-');

describe('the alert rules', () => {
  it('pass promtool check rules', () => {
    expect(execFileSync('promtool', ['check', 'rules', 'deploy/prometheus-rules.yml'], { encoding: 'utf8' })).toContain(
      'SUCCESS: 8 rules found',
    );
  });

  it('pass promtool test rules: the books alert fires on an unbalanced SKU, the 503 burst after its 2 minutes', () => {
    // promtool exits non-zero (execFileSync throws, with its report) when an expected alert differs.
    const report = execFileSync('promtool', ['test', 'rules', 'prometheus-rules.test.yml'], {
      cwd: 'deploy',
      encoding: 'utf8',
    });
    expect(report).toContain('SUCCESS');
    const tested = parse(readFileSync('deploy/prometheus-rules.test.yml', 'utf8')).tests.flatMap(
      (test: { alert_rule_test: { alertname: string; exp_alerts: unknown[] }[] }) => test.alert_rule_test,
    );
    const firing = (alert: string) =>
      tested.some(
        (t: { alertname: string; exp_alerts: unknown[] }) => t.alertname === alert && t.exp_alerts.length > 0,
      );
    expect(firing('StockBooksUnbalanced')).toBe(true);
    expect(firing('StockUnavailableBurst')).toBe(true);
  });

  it('each point to a section of docs/operations.md that exists', () => {
    const anchors = new Set(
      [...readFileSync('docs/operations.md', 'utf8').matchAll(/^#+ (.+)$/gm)].map(([, heading]) => anchorOf(heading!)),
    );
    expect(rules.map((rule) => rule.alert).sort()).toEqual([
      'StockBooksAuditStalled',
      'StockBooksUnbalanced',
      'StockInstanceNotReady',
      'StockLockBusy',
      'StockOutboxBacklog',
      'StockServerErrors',
      'StockUnavailableBurst',
      'StockWebhookLag',
    ]);
    for (const rule of rules) {
      const [file, anchor] = rule.annotations.runbook_url!.split('#');
      expect(file, rule.alert).toBe('docs/operations.md');
      expect(anchors.has(anchor!), `${rule.alert}: #${anchor}`).toBe(true);
    }
  });
});

describe('the Grafana dashboard', () => {
  it('asks for its Prometheus data source on import, and every query uses it', () => {
    expect(dashboard.templating.list).toContainEqual(
      expect.objectContaining({ name: 'datasource', type: 'datasource', query: 'prometheus' }),
    );
    for (const panel of panels) {
      expect(panel.datasource.uid, panel.title).toBe('${datasource}');
      for (const target of panel.targets) expect(target.datasource.uid, panel.title).toBe('${datasource}');
    }
    expect(new Set(panels.map((panel) => panel.title))).toEqual(
      new Set([
        'Unbalanced SKUs',
        'Since the last full audit',
        'Instances ready',
        'Outbox backlog',
        'Orders/s by outcome',
        'Refusals/s by reason',
        'Answer time',
        'Lock waits',
        'Lock busy ratio',
        'Readiness by instance',
        'Webhook lag',
        'Outbox',
      ]),
    );
  });
});

describe('every metric deploy/ names', () => {
  let own: OwnDatabase;
  let svc: RunningService;
  const receiver = new EventReceiver();

  beforeAll(async () => {
    own = await createOwnDatabase('deploy_metrics');
    expect((await own.migrator.migrateToLatest()).error).toBeUndefined();
    await receiver.open();
    svc = await startService({
      DATABASE_URL: own.url,
      AUDIT_INTERVAL_MS: '200',
      EVENTS_POLL_MS: '50',
      WEBHOOK_ALLOW_PRIVATE_DESTINATIONS: '1',
    });
  });
  afterAll(async () => {
    await svc?.stop();
    await receiver.close();
    await own?.drop();
  });

  it('is exported by the service, with a sample, once it has taken orders, delivered events and audited', async () => {
    const sku = uniqueSku('deploy');
    expect((await call(svc.url, 'POST', '/skus', { sku, stock: 5, segments: 2 })).status).toBe(201);
    expect((await call(svc.url, 'POST', '/webhooks', { url: receiver.url, types: ['order.placed'] })).status).toBe(201);
    expect((await call(svc.url, 'POST', '/orders', { sku, quantity: 3 })).status).toBe(201);
    expect((await call(svc.url, 'POST', '/orders', { sku, quantity: 3 })).status).toBe(409);
    expect(await waitFor(() => receiver.received.length > 0, 10_000)).toBeLessThan(Infinity);
    expect(
      await waitFor(async () => (await call(svc.url, 'GET', '/audit')).body.lastFullPass !== null, 10_000),
    ).toBeLessThan(Infinity);

    const text = (await call(svc.url, 'GET', '/metrics')).body as string;
    const sampled = new Set([...text.matchAll(/^([a-zA-Z_:][\w:]*)[{ ]/gm)].map(([, name]) => name));
    const named = new Set(
      [...rules.map((rule) => rule.expr), ...panels.flatMap((p) => p.targets.map((t) => t.expr))].flatMap(metricsIn),
    );
    // What the alerts and panels were written for: if one drops out of deploy/, this list says so.
    expect(named.size).toBeGreaterThanOrEqual(12);
    const missing = [...named].filter((name) => !sampled.has(name));
    expect(missing).toEqual([]);
  });
});
