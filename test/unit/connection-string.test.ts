import { describe, expect, it } from 'vitest';
import { ConnectionStringError, parseConnectionString } from '../../src/db/connection-string.js';
import { dropsConnection, NoSuitableHostError } from '../../src/db/listed-hosts.js';
import { isDependencyFailure } from '../../src/errors.js';

describe("parseConnectionString: libpq's host lists", () => {
  it('reads every host and port of a URI, its target_session_attrs, and the rest as pg would', () => {
    const target = parseConnectionString(
      'postgresql://app:p%40ss@db1:5433,db2,[::1]:6000/stock?target_session_attrs=read-write&application_name=svc',
    );
    expect(target.hosts).toEqual([
      { host: 'db1', port: 5433 },
      { host: 'db2', port: 5432 },
      { host: '::1', port: 6000 },
    ]);
    expect(target.targetSessionAttrs).toBe('read-write');
    expect(target.client).toMatchObject({ user: 'app', password: 'p@ss', database: 'stock', application_name: 'svc' });
    expect(target.client).not.toHaveProperty('host');
    expect(target.client).not.toHaveProperty('target_session_attrs');
  });

  it('takes hosts and ports from the query, one port for all or one each', () => {
    expect(parseConnectionString('postgres://u@/db?host=a,b&port=7000').hosts).toEqual([
      { host: 'a', port: 7000 },
      { host: 'b', port: 7000 },
    ]);
    expect(parseConnectionString('postgres://u@/db?host=a,b&port=7000,7001').hosts[1]).toEqual({
      host: 'b',
      port: 7001,
    });
  });

  it("reads libpq's key=value form, quoted values included", () => {
    const target = parseConnectionString(
      "host=h1,h2 port=5432,5433 dbname=stock user=app password='it\\'s a \\\\ secret' target_session_attrs=primary",
    );
    expect(target.hosts).toEqual([
      { host: 'h1', port: 5432 },
      { host: 'h2', port: 5433 },
    ]);
    expect(target.targetSessionAttrs).toBe('primary');
    expect(target.client).toMatchObject({ user: 'app', password: "it's a \\ secret", database: 'stock' });
  });

  it('defaults to any, and one host stays one host', () => {
    const target = parseConnectionString('postgres://stock:stock@127.0.0.1:5432/stock');
    expect(target).toMatchObject({ hosts: [{ host: '127.0.0.1', port: 5432 }], targetSessionAttrs: 'any' });
  });

  it.each([
    ['postgres://u@a:1,b:2/db?target_session_attrs=standby', /target_session_attrs/],
    ['postgres://u@a,b/db?port=1,2,3', /2 hosts but 3 ports/],
    ['postgres://u@a:99999/db', /port/],
    ['postgres://u@a:1,,b:2/db', /empty/],
    ['host=a port', /key=value/],
  ])('refuses %s without echoing it', (text, message) => {
    expect(() => parseConnectionString(text)).toThrow(ConnectionStringError);
    expect(() => parseConnectionString(text)).toThrow(message);
  });

  it('keeps the password out of its errors', () => {
    expect(() => parseConnectionString('postgres://u:s3cret@a:1,b:2/db?target_session_attrs=x')).toThrow(
      expect.objectContaining({ message: expect.not.stringContaining('s3cret') }),
    );
  });
});

describe('what a failover looks like to the service', () => {
  it('answers 503 (not 500) when no host is writable, or the server went read-only or away', () => {
    expect(isDependencyFailure(new NoSuitableHostError('none of the 2 Postgres hosts is read-write now'))).toBe(true);
    const readOnly = Object.assign(new Error('cannot execute INSERT in a read-only transaction'), { code: '25006' });
    expect(isDependencyFailure(readOnly)).toBe(true);
    expect(isDependencyFailure(new Error('Client was closed and is not queryable'))).toBe(true);
  });

  it('drops a connection whose server went read-only or away, and keeps one that met an ordinary error', () => {
    expect(dropsConnection(Object.assign(new Error('read-only'), { code: '25006' }))).toBe(true);
    expect(dropsConnection(Object.assign(new Error('terminating connection'), { code: '57P01' }))).toBe(true);
    expect(dropsConnection(new Error('Connection terminated unexpectedly'))).toBe(true);
    expect(dropsConnection(Object.assign(new Error('duplicate key'), { code: '23505' }))).toBe(false);
    expect(dropsConnection(Object.assign(new Error('lock timeout'), { code: '55P03' }))).toBe(false);
  });
});
