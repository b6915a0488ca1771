import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { createReconcileHandler } from '../../lambdas/reconcile/handler';
import { startLoopbackGitHub, type GitHubJob, type LoopbackGitHub } from '../../local/ci/github-server';
import { functionUrlEvent, githubWorkflowJobQueued } from '../../local/deliveries';
import { scaled } from '../support/slowdown';
import { motoForFile } from '../support/moto-per-file';
import { ReconcileFleet } from './moto-harness';

/**
 * The reconciler end to end: the loopback GitHub (deliveries, redeliveries, queued runs and
 * jobs, rate-limit headers in GitHub's wire format), the real webhook, queue, scale-up with
 * its per-job record, all on moto.
 */
const ORG = 'acme';
const SECRET = 'webhook-secret-for-reconcile';
const LABELS = ['self-hosted', 'linux'];
const m = motoForFile();
let gh: LoopbackGitHub;
let f: ReconcileFleet;

afterEach(async () => gh?.close());

async function setUp(options: Parameters<typeof startLoopbackGitHub>[0] = { organization: ORG }): Promise<void> {
  gh = await startLoopbackGitHub({ ...options, redeliver: ({ guid, job }) => deliver(job, guid) });
  f = await ReconcileFleet.github(m, gh, SECRET);
}

/** GitHub's redelivery: the job's queued delivery with its original GUID, posted to the webhook. */
async function deliver(job: GitHubJob, guid: string): Promise<number> {
  const delivery = githubWorkflowJobQueued({ jobId: job.id, runId: job.runId, repository: job.repository, labels: job.labels }, SECRET, guid);
  const answer = (await f.webhook()(functionUrlEvent(delivery))) as { statusCode: number };
  return answer.statusCode;
}

const provider = () => f.githubProvider(gh);
const scaleUp = () => f.scaleUp({ github: provider() });

function reconciler(options: Parameters<typeof createReconcileHandler>[0]['options'] = {}, now?: () => Date) {
  return f.reconciler({ github: provider() }, { ...options, github: { minQueuedSeconds: 0, ...options.github } }, now);
}

/** GitHub requests the reconciler made, token minting and the installation lookup aside. */
const reconcilerRequests = (from: number) => gh.requests().slice(from).filter((r) => !/\/access_tokens$|\/installation$/.test(r.path));

describe('reconciler against the loopback GitHub and moto', () => {
  beforeEach(async () => setUp());

  it('a lost delivery is found and a failed one redelivered, each job served exactly once; copies of a job being served launch nothing', { timeout: scaled(120_000) }, async () => {
    const delivered = gh.addJob(`${ORG}/app`, LABELS);
    const failed = gh.addJob(`${ORG}/app`, LABELS);
    const lost = gh.addJob(`${ORG}/web`, LABELS);
    gh.addJob(`${ORG}/web`, ['ubuntu-latest']); // GitHub's own runners: not ours
    const ok = githubWorkflowJobQueued({ jobId: delivered.id, runId: delivered.runId, repository: delivered.repository, labels: LABELS }, SECRET);
    expect(((await f.webhook()(functionUrlEvent(ok))) as { statusCode: number }).statusCode).toBe(202);
    gh.recordDelivery(delivered.id, 202);
    gh.recordDelivery(failed.id, 503);
    await f.drain(scaleUp());
    // The delivered job's runner is registered and its instance booting: the job is still queued at GitHub.
    expect([...(await f.served()).keys()]).toEqual([`github:${delivered.id}`]);

    const report = await reconciler()();
    await gh.redeliveriesSettled();
    expect(report).toMatchObject({ redelivered: 1, queued: 3 });
    const redeliveries = gh.deliveries().filter((d) => d.redelivery);
    expect(redeliveries).toHaveLength(1);
    expect(redeliveries[0]).toMatchObject({ status_code: 202, status: 'OK' });
    await f.drain(scaleUp());

    const byJob = await f.served();
    expect(new Map([...byJob].map(([job, traces]) => [job, traces.length]))).toEqual(
      new Map([
        [`github:${delivered.id}`, 1],
        [`github:${failed.id}`, 1],
        [`github:${lost.id}`, 1],
      ]),
    );
    // The lost job's trace id says the reconciler found it; the delivered one kept the webhook's.
    expect(byJob.get(`github:${lost.id}`)).toEqual([`reconciler-github-${lost.id}`]);
    expect(byJob.get(`github:${delivered.id}`)).toEqual([ok.deliveryId]);
    expect(gh.runners()).toHaveLength(3);
    // The delivered job's reconciled copy, and the failed job's second path (redelivery and scan),
    // each stopped before a registration: by the per-job record, by the instance already
    // serving the job, or as the same job twice in one batch.
    const stopped = ['another delivery of this job holds its record; this copy launches nothing', 'job already has an instance', 'job appears twice in the batch; the other message serves it'];
    expect(stopped.flatMap((m) => f.lines.logs(m))).toHaveLength(2);
    expect(f.lines.metric('Redeliveries')).toBe(1);
    expect(f.lines.metric('JobsReconciled', { Pool: 'linux' })).toBe(3);

    // A second run: nothing is redelivered again, and nothing more launches.
    const again = await reconciler()();
    await gh.redeliveriesSettled();
    expect(again.redelivered).toBe(0);
    await f.drain(scaleUp());
    expect([...(await f.served()).values()].map((t) => t.length)).toEqual([1, 1, 1]);
    expect(gh.runners()).toHaveLength(3);
  });

  it('a job the reconciler queues again on three runs has one received and one queued line; a delivered job keeps its webhook lines only', { timeout: scaled(120_000) }, async () => {
    const lost = gh.addJob(`${ORG}/web`, LABELS);
    const delivered = gh.addJob(`${ORG}/app`, LABELS);
    const ok = githubWorkflowJobQueued({ jobId: delivered.id, runId: delivered.runId, repository: delivered.repository, labels: LABELS }, SECRET);
    expect(((await f.webhook()(functionUrlEvent(ok))) as { statusCode: number }).statusCode).toBe(202);
    gh.recordDelivery(delivered.id, 202);
    await f.drain(scaleUp());
    // moto's instances never boot: both jobs stay queued at GitHub, so every run queues both
    // again. Runs are minutes apart, past SQS FIFO's 5-minute deduplication window, so each
    // run's copies reach scale-up: played by giving each run's sends their own deduplication id.
    let run = 0;
    const name = 'reconcile-run-dedup';
    f.c.sqs.middlewareStack.add(
      (next, context) => async (args) => {
        const input = args.input as { MessageDeduplicationId?: string };
        if (context.commandName === 'SendMessageCommand' && input.MessageDeduplicationId?.includes('reconciler-')) input.MessageDeduplicationId += `-run${run}`;
        return next(args);
      },
      { step: 'initialize', name },
    );
    try {
      for (run = 1; run <= 3; run++) {
        expect((await reconciler()()).queued).toBe(2);
        await f.drain(scaleUp());
      }
    } finally {
      f.c.sqs.middlewareStack.remove(name);
    }
    // Each run's copy of the lost job reached scale-up (a dequeued line each, at least), and only the first claimed a fresh record.
    expect(f.lines.logs('ledger').filter((l) => l.jobId === `github:${lost.id}` && l.stage === 'dequeued').length).toBeGreaterThanOrEqual(3);
    const intake = (id: number) => f.lines.logs('ledger').filter((l) => l.jobId === `github:${id}` && (l.stage === 'received' || l.stage === 'queued')).map((l) => [l.stage, l.traceId, l.pool]);
    expect(intake(lost.id)).toEqual([
      ['received', `reconciler-github-${lost.id}`, 'linux'],
      ['queued', `reconciler-github-${lost.id}`, 'linux'],
    ]);
    expect(intake(delivered.id)).toEqual([
      ['received', ok.deliveryId, 'linux'],
      ['queued', ok.deliveryId, 'linux'],
    ]);
  });

  it('reads repositoriesPerRun repositories a run; consecutive runs reach every repository within ceil(N/cap) runs', async () => {
    await gh.close();
    const repositories = Array.from({ length: 5 }, (_, i) => `${ORG}/repo-${i}`);
    await setUp({ organization: ORG, repositories });
    const jobs = repositories.map((r) => gh.addJob(r, LABELS));
    const cap = 2;
    // Scheduled runs 5 minutes apart, from a run number that is not a multiple of anything in play.
    const first = Math.floor(Date.now() / 300_000) + 7;
    const queued: number[] = [];
    const runsRead: string[] = [];
    for (let k = 0; k < Math.ceil(repositories.length / cap); k++) {
      const from = gh.requests().length;
      const report = await reconciler({ github: { repositoriesPerRun: cap, intervalSeconds: 300 } }, () => new Date((first + k) * 300_000))();
      const lists = reconcilerRequests(from).filter((r) => r.path.endsWith('/actions/runs'));
      expect(lists).toHaveLength(2 * cap); // queued and in_progress, per repository of the window
      runsRead.push(...lists.map((r) => r.path));
      queued.push(report.queued);
    }
    expect(new Set(runsRead).size).toBe(repositories.length);
    await f.drain(scaleUp());
    expect([...(await f.served()).keys()].sort()).toEqual(jobs.map((j) => `github:${j.id}`).sort());
    expect(queued.reduce((a, b) => a + b)).toBeGreaterThanOrEqual(repositories.length);
  });

  it('its requests stay within the stated budget: D + R + floor(N/100) + 1 + 2 min(N, cap) + min(runs, runReadLimit)', async () => {
    await gh.close();
    const repositories = Array.from({ length: 6 }, (_, i) => `${ORG}/repo-${i}`);
    await setUp({ organization: ORG, repositories });
    for (const r of repositories.slice(0, 4)) gh.addJob(r, LABELS);
    const run = gh.addJob(repositories[4]!, LABELS).runId;
    gh.addJob(repositories[4]!, LABELS, run);
    const failedJob = gh.addJob(repositories[5]!, LABELS);
    gh.recordDelivery(failedJob.id, 500);
    const n = repositories.length;
    const runs = 6;

    const from = gh.requests().length;
    const report = await reconciler()();
    await gh.redeliveriesSettled();
    const made = reconcilerRequests(from);
    // D = 1 page of deliveries, R = 1 redelivery, 1 page of repositories, 2 run lists per repository, 1 job list per run.
    const budget = 1 + 1 + Math.floor(n / 100) + 1 + 2 * Math.min(n, 50) + Math.min(runs, 100);
    expect(made.length).toBe(report.requests);
    expect(made.length).toBeLessThanOrEqual(budget);
    expect(made.filter((r) => r.path.endsWith('/jobs'))).toHaveLength(runs);
    expect(report.queued).toBe(7);

    // runReadLimit caps the job lists; the rest waits for the next run.
    const capped = gh.requests().length;
    const limited = await reconciler({ github: { runReadLimit: 2 } })();
    expect(reconcilerRequests(capped).filter((r) => r.path.endsWith('/jobs'))).toHaveLength(2);
    expect(limited.requests).toBeLessThanOrEqual(1 + 0 + 1 + 2 * n + 2);

    // repositoriesPerRun caps the run lists: 2 per repository of the window.
    const windowed = gh.requests().length;
    const capped3 = await reconciler({ github: { repositoriesPerRun: 3 } })();
    expect(reconcilerRequests(windowed).filter((r) => r.path.endsWith('/actions/runs'))).toHaveLength(2 * 3);
    expect(capped3.requests).toBeLessThanOrEqual(1 + 0 + 1 + 2 * 3 + Math.min(runs, 100));
  });

  it('a busy repository first in the window spends only its share of the job-list reads; every other repository is read in the same run', { timeout: scaled(120_000) }, async () => {
    await gh.close();
    // repo-00 sorts first and the window of 20 starts at it: 150 queued runs of GitHub's own
    // runners (listed, 100 of them, each a job list to read, none ours); repo-01..19 one job each.
    const repositories = Array.from({ length: 20 }, (_, i) => `${ORG}/repo-${String(i).padStart(2, '0')}`);
    await setUp({ organization: ORG, repositories });
    for (let i = 0; i < 150; i++) gh.addJob(repositories[0]!, ['ubuntu-latest']);
    const ours = repositories.slice(1).map((r) => gh.addJob(r, LABELS));
    const limit = 40;
    const from = gh.requests().length;
    const report = await reconciler({ github: { repositoriesPerRun: 20, runReadLimit: limit } })();
    const jobLists = reconcilerRequests(from).filter((r) => r.path.endsWith('/jobs'));
    // repo-00's share is floor(40 / 20) = 2; the 19 others use 1 each of what is left.
    expect(jobLists.filter((r) => r.path.includes('/repo-00/'))).toHaveLength(2);
    expect(jobLists).toHaveLength(2 + 19);
    expect(jobLists.length).toBeLessThanOrEqual(limit);
    expect(report.queued).toBe(19);
    await f.drain(scaleUp());
    expect([...(await f.served()).keys()].sort()).toEqual(ours.map((j) => `github:${j.id}`).sort());
  });

  it('a window wider than the run\'s job-list reads is narrowed to them: every repository is read within ceil(N / limit) runs', { timeout: scaled(120_000) }, async () => {
    await gh.close();
    // 4 repositories, cap 4, limit 2: a window of 4 would start at the same repository every
    // run (4 % 4 = 0) and its last 2 repositories would get no read, ever.
    const repositories = Array.from({ length: 4 }, (_, i) => `${ORG}/repo-${i}`);
    await setUp({ organization: ORG, repositories });
    for (const r of repositories) gh.addJob(r, LABELS);
    const interval = 300_000;
    const base = Math.floor(Date.now() / interval) * interval;
    const from = gh.requests().length;
    for (const at of [base, base - interval]) await reconciler({ github: { repositoriesPerRun: 4, runReadLimit: 2 } }, () => new Date(at + 1_000))();
    const read = new Set(reconcilerRequests(from).filter((r) => r.path.endsWith('/jobs')).map((r) => r.path.split('/')[3]));
    expect([...read].sort()).toEqual(['repo-0', 'repo-1', 'repo-2', 'repo-3']);
  });

  it('with 250 repositories the repository list is read in 3 pages and the run stays within the budget', { timeout: scaled(120_000) }, async () => {
    await gh.close();
    const repositories = Array.from({ length: 250 }, (_, i) => `${ORG}/repo-${String(i).padStart(3, '0')}`);
    await setUp({ organization: ORG, repositories });
    // One job in every fifth repository; the window (cap 50) reads 50 of them, 10 with a run.
    for (const r of repositories.filter((_, i) => i % 5 === 0)) gh.addJob(r, LABELS);
    const n = repositories.length;
    const from = gh.requests().length;
    const report = await reconciler()();
    const made = reconcilerRequests(from);
    expect(made.filter((r) => r.path === '/installation/repositories')).toHaveLength(Math.floor(n / 100) + 1);
    const runs = made.filter((r) => r.path.endsWith('/jobs')).length;
    expect(runs).toBe(10);
    expect(report.queued).toBe(10);
    // D = 1 page of deliveries, no failed delivery, 3 pages of repositories, 2 run lists per repository of the window.
    const budget = 1 + 0 + Math.floor(n / 100) + 1 + 2 * Math.min(n, 50) + Math.min(runs, 100);
    expect(made.length).toBe(report.requests);
    expect(made.length).toBe(budget);
  });

  it('reads x-ratelimit-* and stops before the reserve, publishing what is left', async () => {
    await gh.close();
    const repositories = Array.from({ length: 10 }, (_, i) => `${ORG}/repo-${i}`);
    await setUp({ organization: ORG, repositories, rateLimit: 1000 });
    for (const r of repositories) gh.addJob(r, LABELS);
    // Reserve: 20% of 1000. Five requests are left above it.
    gh.setRateLimitRemaining('installation', 205);
    const from = gh.requests().length;
    const report = await reconciler()();
    expect(report.stoppedAt).toBe('installation');
    const made = reconcilerRequests(from).filter((r) => r.credential === 'installation');
    expect(made).toHaveLength(5);
    const remaining = (credential: string) => f.lines.json().find((l) => l._aws && l.Credential === credential)?.CiRateLimitRemaining;
    expect(remaining('github-installation')).toEqual([200]);
    expect(remaining('github-app')).toEqual([expect.any(Number)]);
    expect(f.lines.logs('reconciler stopped at the rate limit reserve; the next run goes on')).toHaveLength(1);
  });
});
