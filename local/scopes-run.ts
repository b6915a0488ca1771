/**
 * `npm run local -- --scopes`: one fleet serving several scopes at once. The GitHub jobs
 * alternate between the example's organisation and a second one whose pool has the same labels
 * (pool `organization`), the GitLab jobs between two groups, and two GitHub Apps share the load;
 * after the first half of the GitHub jobs the first App's budgets are spent (the loopback answers
 * it 403, rate limit exceeded), so the rest are served through the other. `rotationWave` and
 * `buildScopesProof` are pure: table-tested in test/local/orch-scopes.test.ts.
 */
import type { GitHubRequest } from './ci/github-server';

/** Where the jobs of one scope go: its pool, its scope (organisation or project), and where a runner of that pool registers. */
export interface ScopeTarget {
  readonly pool: string;
  /** The organisation (GitHub) or the project path (GitLab) the job belongs to. */
  readonly scope: string;
  /** The CI server's scope of a runner the pool registers: `org:<login>` (GitHub), `group_type:<id>` (GitLab). */
  readonly runnerScope: string;
}

/**
 * How many of the next jobs, sent round `targets` from the `next`-th, find a parked instance of
 * their pool (`free`), at most `max`: a wave that lands warm and keeps the alternation.
 */
export function rotationWave(targets: readonly Pick<ScopeTarget, 'pool'>[], next: number, free: (pool: string) => number, max: number): number {
  const left = new Map<string, number>();
  let n = 0;
  while (n < max && targets.length > 0) {
    const pool = targets[(next + n) % targets.length]!.pool;
    const f = left.get(pool) ?? free(pool);
    if (f <= 0) break;
    left.set(pool, f - 1);
    n++;
  }
  return n;
}

/** One job the run sent to a scope, as the proof reports it. */
export interface ScopedJob {
  readonly ciJobId: string;
  readonly pool: string;
  readonly scope: string;
  /** The scope of the runner that ran it, as the CI server recorded it (absent: no runner took it). */
  readonly runnerScope?: string;
  readonly served: boolean;
}

/** The App whose budgets were spent mid-run, and what happened after. */
export interface AppExhaustion {
  readonly appId: string;
  /** GitHub jobs sent before its budgets were set to 0, and after. */
  readonly jobsBefore: number;
  readonly jobsAfter: number;
  /** Of the jobs after it, those served. */
  readonly servedAfter: number;
  /** Per App, its requests after that point: answered 2xx, and refused (any other status). */
  readonly requestsAfter: Readonly<Record<string, { readonly ok: number; readonly refused: number }>>;
}

export interface ScopesProof {
  readonly github: readonly ScopedJob[];
  readonly gitlab: readonly ScopedJob[];
  /** Apps the loopback GitHub answered with a 2xx at least once. */
  readonly appsUsed: readonly string[];
  readonly exhaustion?: AppExhaustion;
  /** What is wrong, one line each (empty: passed). */
  readonly failures: readonly string[];
  readonly passed: boolean;
}

/** A job the run sent, with its target. */
export interface SentScopedJob {
  readonly provider: 'github' | 'gitlab';
  readonly ciJobId: string;
  readonly target: ScopeTarget;
}

export function buildScopesProof(input: {
  readonly sent: readonly SentScopedJob[];
  /** The runner scope that ran a job, from the CI server. */
  readonly ranOn: (provider: 'github' | 'gitlab', ciJobId: string) => string | undefined;
  /** Whether the report counts the job served. */
  readonly served: (provider: 'github' | 'gitlab', ciJobId: string) => boolean;
  readonly apps: readonly string[];
  readonly requests: readonly GitHubRequest[];
  /** The App spent mid-run: its id, the loopback's request count and the GitHub jobs sent at that point. */
  readonly exhausted?: { readonly appId: string; readonly atRequest: number; readonly jobsBefore: number };
}): ScopesProof {
  const failures: string[] = [];
  const jobs = (provider: 'github' | 'gitlab'): ScopedJob[] =>
    input.sent
      .filter((s) => s.provider === provider)
      .map((s) => {
        const runnerScope = input.ranOn(provider, s.ciJobId);
        const served = input.served(provider, s.ciJobId);
        if (!served) failures.push(`${provider} job ${s.ciJobId} of ${s.target.scope} was not served`);
        if (runnerScope !== s.target.runnerScope) failures.push(`${provider} job ${s.ciJobId} of ${s.target.scope} ran on a runner of ${runnerScope ?? 'no scope'}, not ${s.target.runnerScope}`);
        return { ciJobId: s.ciJobId, pool: s.target.pool, scope: s.target.scope, ...(runnerScope === undefined ? {} : { runnerScope }), served };
      });
  const github = jobs('github');
  const gitlab = jobs('gitlab');
  const ok = (r: GitHubRequest) => r.status !== undefined && r.status >= 200 && r.status < 300;
  const appsUsed = input.apps.filter((id) => input.requests.some((r) => r.appId === id && ok(r)));
  for (const id of input.apps) if (!appsUsed.includes(id)) failures.push(`App ${id} made no request GitHub answered`);
  let exhaustion: AppExhaustion | undefined;
  if (input.exhausted) {
    const { appId, atRequest, jobsBefore } = input.exhausted;
    const requestsAfter = Object.fromEntries(input.apps.map((id) => [id, { ok: 0, refused: 0 }]));
    for (const r of input.requests.slice(atRequest)) if (r.appId !== undefined && requestsAfter[r.appId]) requestsAfter[r.appId]![ok(r) ? 'ok' : 'refused']++;
    const after = github.slice(jobsBefore);
    exhaustion = { appId, jobsBefore, jobsAfter: after.length, servedAfter: after.filter((j) => j.served).length, requestsAfter };
    if (after.length === 0) failures.push(`no GitHub job was sent after App ${appId}'s budgets were spent`);
    if (requestsAfter[appId]!.ok > 0) failures.push(`App ${appId} was answered ${requestsAfter[appId]!.ok} time(s) after its budgets were spent`);
    if (!input.apps.some((id) => id !== appId && requestsAfter[id]!.ok > 0)) failures.push(`no other App than ${appId} was answered after its budgets were spent`);
  }
  return { github, gitlab, appsUsed, ...(exhaustion ? { exhaustion } : {}), failures, passed: failures.length === 0 };
}

/** The report's lines: each job's scope, pool and runner scope, the Apps, the exhaustion. */
export function formatScopesProof(p: ScopesProof): string[] {
  const job = (provider: string) => (j: ScopedJob) => `  ${provider} job ${j.ciJobId} of ${j.scope}: pool ${j.pool}, runner in ${j.runnerScope ?? '(none)'}${j.served ? '' : ', NOT served'}`;
  const lines = [`scopes: ${p.passed ? 'PASSED' : 'FAILED'}: ${p.github.length} GitHub and ${p.gitlab.length} GitLab job(s), each on its own scope's pool and runner${p.passed ? '' : ' (not all)'}`, ...p.github.map(job('github')), ...p.gitlab.map(job('gitlab')), `  Apps answered: ${p.appsUsed.join(', ') || 'none'}`];
  const e = p.exhaustion;
  if (e) {
    const after = Object.entries(e.requestsAfter).map(([id, n]) => `${id} ${n.ok} answered, ${n.refused} refused`).join('; ');
    lines.push(`  App ${e.appId} spent after ${e.jobsBefore} GitHub job(s): ${e.servedAfter} of ${e.jobsAfter} later job(s) served; requests after: ${after}`);
  }
  for (const f of p.failures) lines.push(`  ${f}`);
  return lines;
}
