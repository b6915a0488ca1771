/**
 * `npm run local -- --reuse` (issue 12): reusable pools, two waves of jobs from a few GitHub
 * repositories and GitLab projects, and the proof that reuse kept what it should and nothing
 * else. Every job runs `local/runner/reuse-job.sh` (the loopback servers hand it out as the
 * job's script, the fake runners run it as the runner user): it reports the cache files and
 * the planted secrets it finds on its machine, then leaves its own. `buildReuseProof` is pure:
 * its rules are table-tested (test/local/orch-reuse.test.ts).
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { PoolReuseProps } from '../lib/props';
import { TEMPLATE_ROOT } from './instances/launch-templates';

/** The GitHub repositories (in the example's organization) and GitLab projects the jobs come from. */
export const REUSE_GITHUB_REPOSITORIES = ['app', 'api', 'docs'] as const;
export const REUSE_GITLAB_PROJECTS = [
  { id: 4711, path: 'example-group/app' },
  { id: 4712, path: 'example-group/api' },
  { id: 4713, path: 'example-group/docs' },
] as const;
/** The waves: each sends one job per repository and project; the second after the first parked. */
export const REUSE_WAVES = 2;

/** The pools' one cache directory, relative to a machine's directory (its "/"). */
export const REUSE_CACHE_DIR = 'var/cache/ci';

/**
 * Every pool's reuse in the local run: the cache directory in the machine's layout (rendered
 * under TEMPLATE_ROOT like every host path, relocated per machine), the rest the defaults.
 */
export function localReuseProps(): PoolReuseProps {
  return { cacheDirectories: [`${TEMPLATE_ROOT}/${REUSE_CACHE_DIR}`] };
}

const JOB_SCRIPT = join(__dirname, 'runner', 'reuse-job.sh');

/** The job's script as the CI servers hand it out: where to report, then reuse-job.sh. */
export function reuseJobScript(reportsDir: string): string {
  if (!/^\/[A-Za-z0-9._/+-]+$/.test(reportsDir)) throw new Error(`reports directory "${reportsDir}" must be a plain absolute path`);
  return `REPORTS_DIR=${reportsDir}\n${readFileSync(JOB_SCRIPT, 'utf8')}`;
}

/** What one job wrote (reuse-job.sh's JSON). */
export interface ReuseJobReport {
  /** `<provider>-<CI job id>`. */
  readonly job: string;
  /** owner/repo, or the GitLab project id. */
  readonly scope: string;
  /** The machine it ran on: its directory's name, the instance id. */
  readonly instance: string;
  readonly wroteCache: boolean;
  /** The cache directory's files when it started: name, and content (the job that wrote it). */
  readonly cached: readonly { readonly file: string; readonly content: string }[];
  /** Planted secrets it could read on its machine: where (relative to the machine), and whose. */
  readonly found: readonly { readonly path: string; readonly owner: string }[];
  /** Directories (relative to the machine) where it planted its own secret. */
  readonly planted: readonly string[];
}

/** The reports in `dir`, by job key; a file that is not a report is skipped. */
export function readReuseReports(dir: string): Record<string, ReuseJobReport> {
  const out: Record<string, ReuseJobReport> = {};
  if (!existsSync(dir)) return out;
  for (const name of readdirSync(dir).filter((n) => /^[a-z]+-\d+\.json$/.test(n))) {
    try {
      const r = JSON.parse(readFileSync(join(dir, name), 'utf8')) as ReuseJobReport;
      out[r.job] = r;
    } catch {
      // half written: the writer renames a complete file into place, so this is another file
    }
  }
  return out;
}

/** The cache file reuse-job.sh writes for a scope (same rule as its `tr`). */
export function cacheFileOf(scope: string): string {
  return `${scope.replace(/[^A-Za-z0-9._-]/g, '_')}.cache`;
}

/** A job of the reuse run as the scenario sent it. */
export interface ReuseWaveJob {
  readonly provider: 'github' | 'gitlab';
  readonly ciJobId: string;
  /** owner/repo, or the GitLab project id as text. */
  readonly scope: string;
  readonly wave: number;
}

export interface ReuseJobOutcome {
  readonly job: string;
  readonly wave: number;
  readonly scope: string;
  readonly instance?: string;
  /** Second wave: it ran on the instance its scope's first-wave job ran on. */
  readonly hit?: boolean;
  readonly cacheFiles: readonly string[];
  /** Secrets of other jobs it could read (must be none). */
  readonly foreign: readonly string[];
}

export interface ReuseProof {
  readonly passed: boolean;
  readonly failures: readonly string[];
  readonly scopes: number;
  readonly secondWave: number;
  readonly hits: number;
  readonly misses: number;
  /** hits / second-wave jobs (0 without any). */
  readonly hitRate: number;
  readonly jobs: readonly ReuseJobOutcome[];
}

export const jobKey = (j: Pick<ReuseWaveJob, 'provider' | 'ciJobId'>): string => `${j.provider}-${j.ciJobId}`;

/**
 * The proof: every job reported and left its cache file and its secrets (workspace, home, a
 * temp directory: at least three places); no job read another job's secret anywhere on its
 * machine; a first-wave job found no cache (a fresh machine); a second-wave job ran on its
 * scope's first-wave machine (a hit) and found exactly that job's cache file, or, on a miss,
 * no cache at all and never a machine of another scope. It passes when all of that holds and
 * every second-wave job was a hit (each scope's parked instance waits for it in this run).
 */
export function buildReuseProof(jobs: readonly ReuseWaveJob[], reports: Readonly<Record<string, ReuseJobReport>>): ReuseProof {
  const failures: string[] = [];
  const first = new Map(jobs.filter((j) => j.wave === 1).map((j) => [j.scope, reports[jobKey(j)]]));
  const firstInstances = new Map([...first].filter(([, r]) => r).map(([scope, r]) => [r!.instance, scope]));
  const outcomes = jobs.map((j): ReuseJobOutcome => {
    const key = jobKey(j);
    const r = reports[key];
    const base = { job: key, wave: j.wave, scope: j.scope };
    if (!r) {
      failures.push(`${key} (${j.scope}, wave ${j.wave}) wrote no report: its script did not run or did not finish`);
      return { ...base, cacheFiles: [], foreign: [] };
    }
    const foreign = r.found.map((f) => `${f.owner} at ${f.path}`);
    for (const f of foreign) failures.push(`${key} (${j.scope}) read the secret of ${f}`);
    if (!r.wroteCache) failures.push(`${key} (${j.scope}) could not write its cache file`);
    if (r.planted.length < 3) failures.push(`${key} (${j.scope}) planted its secret in ${r.planted.join(', ') || 'nothing'}: the workspace, the home and a temp directory are needed`);
    const cacheFiles = r.cached.map((c) => `${c.file}=${c.content}`);
    const out = { ...base, instance: r.instance, cacheFiles, foreign };
    if (j.wave === 1) {
      if (cacheFiles.length) failures.push(`${key} (${j.scope}) found cache files on a fresh machine: ${cacheFiles.join(', ')}`);
      return out;
    }
    const earlier = first.get(j.scope);
    const hit = earlier !== undefined && earlier.instance === r.instance;
    const owner = firstInstances.get(r.instance);
    if (owner !== undefined && owner !== j.scope) failures.push(`${key} (${j.scope}) ran on ${r.instance}, the machine of ${owner}`);
    const expected = hit ? [`${cacheFileOf(j.scope)}=${earlier.job}`] : [];
    if (cacheFiles.join(' ') !== expected.join(' ')) {
      failures.push(`${key} (${j.scope}, ${hit ? 'hit' : 'miss'}) found cache files [${cacheFiles.join(', ')}], expected [${expected.join(', ')}]`);
    }
    if (!hit) failures.push(`${key} (${j.scope}) missed: it ran on ${r.instance}, not on its scope's parked ${earlier?.instance ?? '(unknown)'}`);
    return { ...out, hit };
  });
  const second = outcomes.filter((o) => o.wave > 1);
  const hits = second.filter((o) => o.hit).length;
  return {
    passed: failures.length === 0 && second.length > 0,
    failures: second.length > 0 ? failures : [...failures, 'no second-wave job was sent'],
    scopes: first.size,
    secondWave: second.length,
    hits,
    misses: second.length - hits,
    hitRate: second.length ? hits / second.length : 0,
    jobs: outcomes,
  };
}

/** The proof as the text report shows it. */
export function formatReuseProof(p: ReuseProof): string[] {
  const lines = [
    `reuse: ${p.passed ? 'PASSED' : 'FAILED'}: ${p.scopes} repositories/projects, reuse hit rate ${Math.round(p.hitRate * 100)}% (${p.hits} of ${p.secondWave} second-wave jobs on their scope's parked instance, ${p.misses} missed)`,
  ];
  for (const j of p.jobs.filter((o) => o.wave > 1)) {
    const foreign = j.foreign.length ? `, READ ${j.foreign.join('; ')}` : ', nothing else of an earlier job';
    lines.push(`  ${j.job} (${j.scope}) on ${j.instance ?? '?'}: ${j.hit ? 'hit' : 'MISS'}, cache [${j.cacheFiles.join(', ')}]${foreign}`);
  }
  for (const f of p.failures) lines.push(`  FAILED: ${f}`);
  return lines;
}
