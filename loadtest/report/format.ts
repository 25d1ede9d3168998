/** Number formatting for the report: fixed, locale-independent. */

export const int = (n: number) => (Number.isFinite(n) ? Math.round(n).toLocaleString('en-US') : '–');

export const ms = (n: number) =>
  !Number.isFinite(n) ? '–' : n >= 100 ? int(n) : n >= 10 ? n.toFixed(1) : n.toFixed(2);

export const pct = (n: number) => (Number.isFinite(n) ? `${(n * 100).toFixed(n < 0.1 ? 1 : 0)} %` : '–');

export const times = (n: number) => (Number.isFinite(n) ? `×${n.toFixed(n >= 10 ? 1 : 2)}` : '–');

export const num = (n: number, digits = 2) => (Number.isFinite(n) ? n.toFixed(digits) : '–');

export const mib = (bytes: number) =>
  Number.isFinite(bytes) && bytes > 0 ? `${(bytes / 2 ** 20).toFixed(0)} MiB` : '–';

export const mark = (ok: boolean | null) => (ok === null ? 'not measured' : ok ? '**met**' : '**not met**');

export function table(header: string[], rows: (string | number)[][], align?: ('l' | 'r')[]): string {
  const sep = header.map((_, i) => ((align?.[i] ?? (i === 0 ? 'l' : 'r')) === 'r' ? '---:' : ':---'));
  const line = (cells: (string | number)[]) => `| ${cells.map((c) => String(c).replace(/\|/g, '\\|')).join(' | ')} |`;
  return [line(header), `|${sep.join('|')}|`, ...rows.map(line)].join('\n');
}

export function statuses(counts: Record<string, number>): string {
  return Object.entries(counts)
    .sort(([a], [b]) => Number(a) - Number(b))
    .map(([status, n]) => `${status}: ${int(n)}`)
    .join(', ');
}
