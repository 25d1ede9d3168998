import { type Kysely, sql } from 'kysely';

// Frozen in time: this migration imports nothing from src/.

/**
 * No webhook URL keeps credentials. URLs with `user:password@` are refused since the destination rule, but endpoints
 * saved before it may still carry them, and `GET /webhooks` showed them back to every holder of `webhooks:manage`.
 * The service never sent them (its HTTP client takes the host from the URL and drops the user part; a receiver
 * authenticates deliveries by their Standard Webhooks signature), so removing them changes nothing a receiver gets:
 * this strips the user part of every stored URL, and a check keeps any from being stored again, whatever writes the
 * row. The user part is what lies between the scheme's `//` and the last `@` before the path, query, fragment or a
 * backslash (which URL parsers read as `/` in http and https URLs), as the WHATWG URL parser reads it.
 * Nothing to undo: the credentials are gone.
 */
const USER_PART = String.raw`^([A-Za-z][A-Za-z0-9+.-]*://)[^/?#\\]*@`;

export async function up(db: Kysely<any>): Promise<void> {
  // `\1`: the scheme and its `//`, kept.
  await sql`update webhooks set url = regexp_replace(url, ${USER_PART}, ${'\\1'}) where url ~ ${USER_PART}`.execute(db);
  await sql`alter table webhooks add constraint webhooks_url_without_credentials
              check (url !~ ${sql.lit(USER_PART)})`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`alter table webhooks drop constraint webhooks_url_without_credentials`.execute(db);
}
