import type pg from 'pg';
import { parseIntoClientConfig } from 'pg-connection-string';

/** One server of a connection string's host list. */
export interface HostPort {
  host: string;
  port: number;
}

/**
 * Which server of the list a connection may use, as libpq's `target_session_attrs`: `any` (the first that answers),
 * `read-write` (the first that takes writes: `transaction_read_only` off) or `primary` (the first not in recovery).
 * A promoted standby may be out of recovery and still refuse writes for a while (pg_auto_failover holds it read-only
 * until the old primary is known demoted), so a service that writes asks for `read-write`.
 */
export type TargetSessionAttrs = 'any' | 'read-write' | 'primary';

export interface ConnectionTarget {
  hosts: HostPort[];
  targetSessionAttrs: TargetSessionAttrs;
  /** Everything else the string says (user, password, database, TLS, options), for pg; no host or port. */
  client: pg.ClientConfig;
}

/** A connection string this service cannot use; the message names what is wrong, never the string (it has secrets). */
export class ConnectionStringError extends Error {}

const TARGETS: readonly TargetSessionAttrs[] = ['any', 'read-write', 'primary'];
const DEFAULT_PORT = 5432;

/**
 * Reads a Postgres connection string in either of libpq's forms, with libpq's list of hosts:
 * `postgres://user:pw@h1:5432,h2:5433/db?target_session_attrs=read-write` (hosts also as `?host=h1,h2&port=…`), or
 * `host=h1,h2 port=5432,5433 dbname=db user=u target_session_attrs=read-write`. A single port applies to every host.
 * pg reads neither list, so the hosts are taken out here and pg parses the rest (user, password, TLS) as a
 * single-host URI.
 */
export function parseConnectionString(text: string): ConnectionTarget {
  const uri = /^postgres(ql)?:\/\//i.test(text) ? text : keywordsToUri(text);
  const match = /^(postgres(?:ql)?:\/\/)(?:([^@/?#]*)@)?([^/?#]*)(.*)$/is.exec(uri);
  if (!match) throw new ConnectionStringError('not a postgres:// URI nor key=value pairs');
  const [, scheme, userinfo, authority, rest] = match as unknown as [
    string,
    string,
    string | undefined,
    string,
    string,
  ];
  const [pathPart = '', query = ''] = rest.split('?', 2);
  const params = new URLSearchParams(query);
  const target = params.get('target_session_attrs') ?? 'any';
  if (!TARGETS.includes(target as TargetSessionAttrs)) {
    throw new ConnectionStringError(`target_session_attrs must be one of ${TARGETS.join(', ')}`);
  }
  params.delete('target_session_attrs');
  const hosts = hostList(authority, params.get('host'), params.get('port'));
  params.delete('host');
  params.delete('port');
  const remaining = params.toString();
  const single = `${scheme}${userinfo === undefined ? '' : `${userinfo}@`}localhost${pathPart}${remaining ? `?${remaining}` : ''}`;
  let client: pg.ClientConfig;
  try {
    client = parseIntoClientConfig(single);
  } catch {
    throw new ConnectionStringError('its user, password, database or options cannot be read');
  }
  delete client.host;
  delete client.port;
  return { hosts, targetSessionAttrs: target as TargetSessionAttrs, client };
}

/** The hosts of the URI's authority (`h1:p1,[::1]:p2`), or of its `host` and `port` parameters. */
function hostList(authority: string, hostParam: string | null, portParam: string | null): HostPort[] {
  const entries = authority
    ? authority.split(',').map((entry) => {
        const bracketed = /^\[([^\]]+)\](?::(\d*))?$/.exec(entry);
        if (bracketed) return { host: bracketed[1]!, port: bracketed[2] || undefined };
        const [host, port, extra] = entry.split(':');
        if (extra !== undefined) throw new ConnectionStringError('an IPv6 host must be in brackets');
        return { host: decodeURIComponent(host!), port: port || undefined };
      })
    : (hostParam ?? 'localhost').split(',').map((host) => ({ host, port: undefined as string | undefined }));
  const ports = portParam?.split(',');
  if (ports && ports.length !== 1 && ports.length !== entries.length) {
    throw new ConnectionStringError(`${entries.length} hosts but ${ports.length} ports`);
  }
  return entries.map((entry, i) => {
    const port = Number(entry.port ?? ports?.[ports.length === 1 ? 0 : i] ?? DEFAULT_PORT);
    if (!entry.host || !Number.isInteger(port) || port < 1 || port > 65_535) {
      throw new ConnectionStringError('a host is empty or a port is not a port number');
    }
    return { host: entry.host, port };
  });
}

const KEYWORD_PAIR = /\s*([a-z_]+)\s*=\s*(?:'((?:[^'\\]|\\.)*)'|([^\s']*))/y;

/** libpq's key=value form as the equivalent URI (values may be quoted with '…', with \' and \\ inside). */
function keywordsToUri(text: string): string {
  const pairs = new Map<string, string>();
  KEYWORD_PAIR.lastIndex = 0;
  while (KEYWORD_PAIR.lastIndex < text.trimEnd().length) {
    const start = KEYWORD_PAIR.lastIndex;
    const pair = KEYWORD_PAIR.exec(text);
    if (!pair || KEYWORD_PAIR.lastIndex === start) {
      throw new ConnectionStringError('not a postgres:// URI nor key=value pairs');
    }
    pairs.set(pair[1]!, pair[2] !== undefined ? pair[2].replace(/\\(.)/g, '$1') : pair[3]!);
  }
  const take = (key: string) => {
    const value = pairs.get(key);
    pairs.delete(key);
    return value;
  };
  const user = take('user');
  const password = take('password');
  const database = take('dbname');
  const userinfo =
    user === undefined
      ? ''
      : `${encodeURIComponent(user)}${password === undefined ? '' : `:${encodeURIComponent(password)}`}@`;
  const params = new URLSearchParams([...pairs]);
  const path = database === undefined ? '' : `/${encodeURIComponent(database)}`;
  return `postgres://${userinfo}${path}?${params.toString()}`;
}
