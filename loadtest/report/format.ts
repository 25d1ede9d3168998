/** Number formatting for the report: fixed, locale-independent; '–' for what was not measured. */
const finite = (format: (n: number) => string) => (n: number) => (Number.isFinite(n) ? format(n) : '–');

export const int = finite((n) => Math.round(n).toLocaleString('en-US'));
export const ms = finite((n) => (n >= 100 ? int(n) : n.toFixed(n >= 10 ? 1 : 2)));
export const pct = finite((n) => `${(n * 100).toFixed(n < 0.1 ? 1 : 0)} %`);
export const times = finite((n) => `×${n.toFixed(n >= 10 ? 1 : 2)}`);
export const num = (n: number, digits = 2) => finite((x) => x.toFixed(digits))(n);
export const mib = (bytes: number) => (bytes > 0 ? `${(bytes / 2 ** 20).toFixed(0)} MiB` : '–');
export const mark = (ok: boolean | null) => (ok === null ? 'not measured' : ok ? '**met**' : '**not met**');
export const statuses = (counts: Record<string, number>) =>
  Object.entries(counts)
    .map(([status, n]) => `${status}: ${int(n)}`)
    .join(', ');

/** A markdown table from rows and one `[header, cell]` per column; undefined (not measured) when there are no rows. */
export function table<T>(
  rows: T[],
  columns: [string, (row: T) => string | number][],
  align = 'lr',
): string | undefined {
  if (!rows.length) return undefined;
  const line = (cells: (string | number)[]) => `| ${cells.map((c) => String(c).replace(/\|/g, '\\|')).join(' | ')} |`;
  const rule = columns.map((_, i) => ((align[i] ?? align.at(-1)) === 'r' ? '---:' : ':---'));
  return [
    line(columns.map(([header]) => header)),
    `|${rule.join('|')}|`,
    ...rows.map((r) => line(columns.map(([, cell]) => cell(r)))),
  ].join('\n');
}
