import type { CellResult } from './run-cell.js';

export interface TargetCheck {
  target: string;
  measured: string;
  met: boolean;
}

const ours = (name: string) => name.startsWith('this-lock') || name.startsWith('backend:');
const fmt = (n: number, digits = 0) =>
  n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });

/** The three targets: throughput against the better peer, utilisation of K keys, the fair mode's longest wait. */
export function checkTargets(results: CellResult[], workers: number): TargetCheck[] {
  const cell = (keys: number, holdMs: number) => results.filter((r) => r.keys === keys && r.holdMs === holdMs);
  const checks: TargetCheck[] = [];

  const single = cell(1, 0);
  if (single.length > 0) {
    const best = maxBy(
      single.filter((r) => ours(r.contender)),
      (r) => r.sectionsPerSecond,
    );
    const peer = maxBy(
      single.filter((r) => !ours(r.contender)),
      (r) => r.sectionsPerSecond,
    );
    if (best && peer) {
      const ratio = best.sectionsPerSecond / peer.sectionsPerSecond;
      checks.push({
        target: 'K=1, H=0: ≥ 1.5 × the better peer',
        measured: `${best.contender} ${fmt(best.sectionsPerSecond)}/s vs ${peer.contender} ${fmt(peer.sectionsPerSecond)}/s = ${fmt(ratio, 2)} ×`,
        met: ratio >= 1.5,
      });
    }
  }

  for (const r of cell(20, 20).filter((r) => ours(r.contender))) {
    const ideal = (20 * 1000) / 20;
    const share = r.sectionsPerSecond / ideal;
    const timerCeiling = (20 * 1000) / r.meanHoldMs;
    checks.push({
      target: `K=20, H=20 ms (${r.contender}): ≥ 0.95 of ideal ${fmt(ideal)}/s`,
      measured: `${fmt(r.sectionsPerSecond)}/s = ${fmt(share, 3)} (holds lasted ${fmt(r.meanHoldMs, 2)} ms: ceiling ${fmt(timerCeiling)}/s)`,
      met: share >= 0.95,
    });
  }

  const fair = cell(1, 20).find((r) => r.contender === 'this-lock-fair');
  if (fair) {
    const bound = 1.5 * workers * 20;
    checks.push({
      target: `K=1, H=20 ms, fair: max wait ≤ ${fmt(bound)} ms`,
      measured: `${fmt(fair.maxWaitMs)} ms`,
      met: fair.maxWaitMs <= bound,
    });
  }
  return checks;
}

export function markdownReport(results: CellResult[], checks: TargetCheck[], context: string): string {
  const lines = [
    context,
    '',
    '| K | H (ms) | lock | sections/s | × baseline | max wait (ms) | p99 wait (ms) | mean hold (ms) | errors |',
    '|---|---|---|---|---|---|---|---|---|',
  ];
  const cells = [...new Set(results.map((r) => `${r.keys}/${r.holdMs}`))];
  for (const c of cells) {
    const rows = results.filter((r) => `${r.keys}/${r.holdMs}` === c);
    // The better peer library; comparing backends, the Redis backend.
    const baseline =
      maxBy(
        rows.filter((r) => !ours(r.contender)),
        (r) => r.sectionsPerSecond,
      ) ?? rows.find((r) => r.contender === 'backend:redis');
    for (const r of rows) {
      const relative = baseline ? fmt(r.sectionsPerSecond / baseline.sectionsPerSecond, 2) : '–';
      lines.push(
        `| ${r.keys} | ${r.holdMs} | ${r.contender} | ${fmt(r.sectionsPerSecond)} | ${relative} | ${fmt(r.maxWaitMs)} | ${fmt(r.p99WaitMs)} | ${fmt(r.meanHoldMs, 2)} | ${r.errors} |`,
      );
    }
  }
  if (checks.length > 0) lines.push('', '| target | measured | met |', '|---|---|---|');
  for (const check of checks) lines.push(`| ${check.target} | ${check.measured} | ${check.met ? 'yes' : 'no'} |`);
  return lines.join('\n');
}

function maxBy<T>(items: T[], score: (item: T) => number): T | undefined {
  return items.reduce<T | undefined>(
    (best, item) => (best === undefined || score(item) > score(best) ? item : best),
    undefined,
  );
}
