import { afterEach, describe, expect, it } from 'vitest';
import { startLoopbackGitLab, type GitLabJob, type LoopbackGitLab } from '../../local/ci/gitlab-server';
import type { WebhookOptions } from '../../lambdas/webhook/handler';
import { functionUrlEvent, gitlabJobPending } from '../../local/deliveries';
import { scaled } from '../support/slowdown';
import { motoForFile } from '../support/moto-per-file';
import { ReconcileFleet } from './moto-harness';

/**
 * The GitLab reconciler end to end: the loopback GitLab (the webhook's event log and resends,
 * pending jobs per project, RateLimit-* headers in GitLab's wire format), the real webhook,
 * queue, scale-up with its per-job record, all on moto.
 */
const GROUP = 42;
const WEBHOOK_TOKEN = 'gitlab-webhook-token-for-reconcile';
const m = motoForFile();
let gl: LoopbackGitLab;
let f: ReconcileFleet;

afterEach(async () => gl?.close());

async function setUp(): Promise<void> {
  gl = await startLoopbackGitLab({ groupId: GROUP, resend: ({ idempotencyKey, job, projectPath }) => deliver(job, projectPath, idempotencyKey) });
  f = await ReconcileFleet.gitlab(m, gl, GROUP, WEBHOOK_TOKEN);
}

/** A Job Hook "pending" of the job, with the delivery's Idempotency-Key, posted to the webhook. */
async function deliver(job: GitLabJob, projectPath: string, idempotencyKey?: string, options?: WebhookOptions): Promise<number> {
  const delivery = gitlabJobPending({ buildId: job.id, projectId: job.projectId, projectPath }, WEBHOOK_TOKEN, idempotencyKey);
  const answer = (await f.webhook(options)(functionUrlEvent(delivery))) as { statusCode: number };
  return answer.statusCode;
}

const provider = () => f.gitlabProvider(gl);
const reconciler = () => f.reconciler({ gitlab: provider() }, { gitlab: { minQueuedSeconds: 0 } });
const scaleUp = () => f.scaleUp({ gitlab: provider() });

describe('GitLab reconciler against the loopback GitLab and moto', () => {
  it('a delivered job, a failed hook event and a never-sent job are each served exactly once', { timeout: scaled(120_000) }, async () => {
    await setUp();
    const path = `group-${GROUP}/project-11`;
    const delivered = gl.addJob(11, ['linux']);
    const failed = gl.addJob(11, ['linux']);
    const neverSent = gl.addJob(12, ['linux']);
    gl.addJob(12, ['windows']); // no pool of ours
    // GitLab logs the delivered event with the webhook's answer; the failed one got a 502.
    const key = gl.recordHookEvent(delivered.id, 202);
    expect(await deliver(delivered, path, key)).toBe(202);
    gl.recordHookEvent(failed.id, 502);
    await f.drain(scaleUp());
    expect([...(await f.served()).keys()]).toEqual([`gitlab:${delivered.id}`]);

    const report = await reconciler()();
    expect(report).toMatchObject({ redelivered: 1, queued: 3 });
    expect(gl.hookEvents()[0]).toMatchObject({ response_status: '202' });
    await f.drain(scaleUp());

    const byJob = await f.served();
    expect(new Map([...byJob].map(([job, traces]) => [job, traces.length]))).toEqual(
      new Map([
        [`gitlab:${delivered.id}`, 1],
        [`gitlab:${failed.id}`, 1],
        [`gitlab:${neverSent.id}`, 1],
      ]),
    );
    // The never-sent job's trace id says the reconciler found it; the delivered one kept the webhook's.
    expect(byJob.get(`gitlab:${neverSent.id}`)).toEqual([`reconciler-gitlab-${neverSent.id}`]);
    expect(byJob.get(`gitlab:${delivered.id}`)).toEqual([key]);
    expect(gl.runners()).toHaveLength(3);
    expect(f.lines.metric('Redeliveries')).toBe(1);
    expect(f.lines.metric('JobsReconciled', { Pool: 'linux' })).toBe(3);

    // A second run: nothing is resent again, and nothing more launches.
    const again = await reconciler()();
    expect(again.redelivered).toBe(0);
    await f.drain(scaleUp());
    expect([...(await f.served()).values()].map((t) => t.length)).toEqual([1, 1, 1]);
    expect(gl.runners()).toHaveLength(3);
  });

  it("a job's intake lands under its pool whether the webhook resolved its tags or queued it unresolved (scale-up stamps it then)", { timeout: scaled(120_000) }, async () => {
    await setUp();
    const path = `group-${GROUP}/project-11`;
    const resolved = gl.addJob(11, ['linux']);
    const unresolved = gl.addJob(11, ['linux']);
    // Both deliveries are the documented Job Hook example (local/deliveries.ts); the second
    // webhook gets no time for the tag lookup, so it queues the job with its tags unresolved.
    expect(await deliver(resolved, path)).toBe(202);
    expect(await deliver(unresolved, path, undefined, { tagLookupTimeoutMs: 0 })).toBe(202);
    expect(f.lines.logs('GitLab tag lookup failed; queueing the job with its tags unresolved')).toHaveLength(1);
    await f.drain(scaleUp());
    const intake = (id: number) => f.lines.logs('ledger').filter((l) => l.jobId === `gitlab:${id}` && (l.stage === 'received' || l.stage === 'queued')).map((l) => [l.stage, l.pool]);
    for (const job of [resolved, unresolved]) {
      expect(intake(job.id)).toEqual([
        ['received', 'linux'],
        ['queued', 'linux'],
      ]);
    }
    // (Scale-up's `dequeued` of the unresolved job is stamped before it resolves the pool: left as it is.)
    expect(f.lines.logs('ledger').filter((l) => l.pool === 'unresolved' && (l.stage === 'received' || l.stage === 'queued'))).toEqual([]);
  });
});
