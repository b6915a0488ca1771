import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { buildReuseProof, cacheFileOf, readReuseReports, reuseJobScript, type ReuseJobReport, type ReuseWaveJob } from '../../local/reuse-run';

/**
 * The reuse run's proof (local/reuse-run.ts) and its job (local/runner/reuse-job.sh): the rules
 * over the jobs' reports, and the job itself on a machine directory with and without the
 * cleaning between two jobs, so the proof is seen to fail on what it must catch.
 */

const report = (job: string, scope: string, instance: string, extra: Partial<ReuseJobReport> = {}): ReuseJobReport => ({
  job,
  scope,
  instance,
  wroteCache: true,
  cached: [],
  found: [],
  planted: ['runner/_work/app/app', 'home/runner', 'tmp'],
  ...extra,
});
const jobs: ReuseWaveJob[] = [
  { provider: 'github', ciJobId: '1', scope: 'acme/app', wave: 1 },
  { provider: 'gitlab', ciJobId: '2', scope: '4711', wave: 1 },
  { provider: 'github', ciJobId: '3', scope: 'acme/app', wave: 2 },
  { provider: 'gitlab', ciJobId: '4', scope: '4711', wave: 2 },
];
const good = (): Record<string, ReuseJobReport> => ({
  'github-1': report('github-1', 'acme/app', 'i-a'),
  'gitlab-2': report('gitlab-2', '4711', 'i-b'),
  'github-3': report('github-3', 'acme/app', 'i-a', { cached: [{ file: 'acme_app.cache', content: 'github-1' }] }),
  'gitlab-4': report('gitlab-4', '4711', 'i-b', { cached: [{ file: '4711.cache', content: 'gitlab-2' }] }),
});

describe('buildReuseProof', () => {
  it('passes when every second-wave job ran on its scope\'s machine and found only its cache file', () => {
    const p = buildReuseProof(jobs, good());
    expect(p.failures).toEqual([]);
    expect(p).toMatchObject({ passed: true, scopes: 2, secondWave: 2, hits: 2, misses: 0, hitRate: 1 });
  });

  it.each<[string, (r: Record<string, ReuseJobReport>) => void, RegExp]>([
    ['a job without a report', (r) => delete r['gitlab-4'], /gitlab-4 \(4711, wave 2\) wrote no report/],
    ['a secret of the earlier job read', (r) => (r['github-3'] = { ...r['github-3']!, found: [{ path: 'tmp/.cwr-secret-github-1', owner: 'github-1' }] }), /github-3 \(acme\/app\) read the secret of github-1 at tmp/],
    ['another scope\'s cache file', (r) => (r['github-3'] = { ...r['github-3']!, cached: [...r['github-3']!.cached, { file: '4711.cache', content: 'gitlab-2' }] }), /found cache files \[acme_app.cache=github-1, 4711.cache=gitlab-2\]/],
    ['its own cache file missing', (r) => (r['gitlab-4'] = { ...r['gitlab-4']!, cached: [] }), /gitlab-4 \(4711, hit\) found cache files \[\], expected \[4711.cache=gitlab-2\]/],
    ['a machine of another scope', (r) => (r['github-3'] = { ...r['github-3']!, instance: 'i-b', cached: [] }), /ran on i-b, the machine of 4711/],
    ['a miss (a fresh machine)', (r) => (r['github-3'] = { ...r['github-3']!, instance: 'i-new', cached: [] }), /github-3 \(acme\/app\) missed/],
    ['a first-wave job finding a cache', (r) => (r['github-1'] = { ...r['github-1']!, cached: [{ file: 'x.cache', content: 'github-0' }] }), /found cache files on a fresh machine/],
    ['secrets planted in too few places', (r) => (r['github-1'] = { ...r['github-1']!, planted: ['tmp'] }), /planted its secret in tmp/],
    ['a cache file not written', (r) => (r['gitlab-2'] = { ...r['gitlab-2']!, wroteCache: false }), /could not write its cache file/],
  ])('fails on %s', (_what, spoil, message) => {
    const reports = good();
    spoil(reports);
    const p = buildReuseProof(jobs, reports);
    expect(p.passed).toBe(false);
    expect(p.failures.join('\n')).toMatch(message);
  });

  it('fails without a second wave', () => {
    expect(buildReuseProof(jobs.slice(0, 2), good())).toMatchObject({ passed: false, secondWave: 0, failures: ['no second-wave job was sent'] });
  });
});

describe('reuse-job.sh on a machine directory', () => {
  let dir = '';
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  /** Runs the job as the fake runner would: in its workspace, with the sandbox's variables. */
  const runJob = (machine: string, reports: string, key: string, scope: string) => {
    const workspace = join(machine, 'runner/_work/app/app');
    mkdirSync(workspace, { recursive: true });
    execFileSync('bash', ['-c', reuseJobScript(reports)], {
      cwd: workspace,
      env: { PATH: process.env.PATH, CWR_MACHINE_ROOT: machine, CWR_JOB_ID: key, CWR_JOB_SCOPE: scope, TMPDIR: join(machine, 'tmp'), HOME: join(machine, 'home/runner') },
    });
  };
  const setUp = () => {
    dir = mkdtempSync(join(tmpdir(), 'cwr-reuse-job-'));
    const machine = join(dir, 'i-0123456789abcdef0');
    for (const d of ['tmp', 'var/tmp', 'dev/shm', 'home/runner']) mkdirSync(join(machine, d), { recursive: true });
    const reports = join(dir, 'reports');
    mkdirSync(reports);
    return { machine, reports };
  };
  const twoJobs: ReuseWaveJob[] = [
    { provider: 'github', ciJobId: '11', scope: 'acme/app', wave: 1 },
    { provider: 'github', ciJobId: '12', scope: 'acme/app', wave: 2 },
  ];

  it('left uncleaned, the second job reads the first one\'s secrets: the proof fails', () => {
    const { machine, reports } = setUp();
    runJob(machine, reports, 'github-11', 'acme/app');
    runJob(machine, reports, 'github-12', 'acme/app');
    const r = readReuseReports(reports);
    expect(r['github-12']!.found.map((f) => f.path).sort()).toEqual(
      ['dev/shm', 'home/runner', 'runner/_work/app/app', 'tmp', 'var/tmp'].map((d) => `${d}/.cwr-secret-github-11`),
    );
    const p = buildReuseProof(twoJobs, r);
    expect(p.passed).toBe(false);
    expect(p.hits).toBe(1);
  });

  it('cleaned but for the cache directory (what a park keeps), the second job finds its cache file alone: the proof passes', () => {
    const { machine, reports } = setUp();
    runJob(machine, reports, 'github-11', 'acme/app');
    // What the boot script's cleaning removes: the workspace, the home's and temp directories' contents.
    rmSync(join(machine, 'runner/_work'), { recursive: true });
    for (const d of ['tmp', 'var/tmp', 'dev/shm', 'home/runner']) for (const f of readdirSync(join(machine, d))) rmSync(join(machine, d, f), { recursive: true });
    runJob(machine, reports, 'github-12', 'acme/app');
    const r = readReuseReports(reports);
    expect(r['github-12']!.cached).toEqual([{ file: cacheFileOf('acme/app'), content: 'github-11' }]);
    expect(buildReuseProof(twoJobs, r)).toMatchObject({ passed: true, hits: 1, hitRate: 1, failures: [] });
  });
});
