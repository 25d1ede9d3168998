import { CompiledQuery, type Kysely } from 'kysely';
import type { Database } from '../../src/db/schema.js';

/** A node of a plan as `explain (format json)` gives it. */
interface PlanNode {
  'Node Type': string;
  'Relation Name'?: string;
  'Actual Rows': number;
  'Actual Loops': number;
  'Rows Removed by Filter'?: number;
  Plans?: PlanNode[];
}

const nodesOf = (node: PlanNode): PlanNode[] => [node, ...(node.Plans ?? []).flatMap(nodesOf)];

/**
 * Runs the query under `explain analyze`; answers, per table, how the plan scanned it and how many rows those scans
 * read (the rows they returned and the rows their filters removed, over every loop).
 */
export async function explainScans(db: Kysely<Database>, query: CompiledQuery) {
  const { rows } = await db.executeQuery<{ 'QUERY PLAN': [{ Plan: PlanNode }] }>(
    CompiledQuery.raw(`explain (analyze, format json) ${query.sql}`, [...query.parameters]),
  );
  const nodes = nodesOf(rows[0]!['QUERY PLAN'][0].Plan);
  return (table: string) => {
    const scans = nodes.filter((n) => n['Relation Name'] === table);
    const rowsRead = scans.reduce(
      (sum, n) => sum + (n['Actual Rows'] + (n['Rows Removed by Filter'] ?? 0)) * n['Actual Loops'],
      0,
    );
    return { scans: scans.map((n) => n['Node Type']), rowsRead };
  };
}
