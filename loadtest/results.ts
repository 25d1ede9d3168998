import type { RunSettings } from './scenarios/context.js';
import type { RunCases } from './scenarios/plan.js';

/** Everything one run measured; written as loadtest/results/<timestamp>.json and read by the report writer. */
export type RunResults = { meta: RunMeta } & RunCases;

export interface RunMeta {
  startedAt: string;
  finishedAt: string;
  mode: 'quick' | 'full';
  command: string;
  gitCommit: string;
  node: string;
  os: string;
  cpus: { count: number; model: string };
  memoryBytes: number;
  target: string;
  backing: string;
  settings: RunSettings;
}
