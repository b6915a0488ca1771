import { afterEach, describe, expect, it } from 'vitest';
import { instanceIdOfRunnerName, JOB_RETRY_DEFAULTS } from '../../lambdas/shared/contract';
import { startLoopbackGitHub, type LoopbackGitHub } from '../../local/ci/github-server';
import { startLoopbackGitLab, type LoopbackGitLab } from '../../local/ci/gitlab-server';
import type { StrayRunners } from '../../local/ci/server-basics';
import { functionUrlEvent, githubWorkflowJobQueued, gitlabJobPending } from '../../local/deliveries';
import { PREFIX } from '../support/fixtures';
import { scaled } from '../support/slowdown';
import { motoForFile } from '../support/moto-per-file';
import { ReconcileFleet } from './moto-harness';

/**
 * The retry cases of issue 11 (section 2) end to end, with the loopback servers' stray-runner
 * modes instead of a fake provider: a runner takes another job's job, or dies before taking
 * any, and the fleet's retry serves the job left queued. The real webhook, reconciler and
 * scale-up (with its per-job record) on moto; the test acts as each runner, with the start
 * config scale-up left for its instance, as the boot script would.
 */
const ORG = 'acme';
const SECRET = 'webhook-secret-for-strays';
const GROUP = 42;
const WEBHOOK_TOKEN = 'gitlab-webhook-token-for-strays';
const m = motoForFile();
let f: ReconcileFleet;
let close: (() => Promise<void>) | undefined;

afterEach(async () => close?.());

/** Past the job's first runner's `retryAfter`: the copy the reconciler finds is a retry. */
const afterRetryAfter = () => new Date(Date.now() + (JOB_RETRY_DEFAULTS.retryAfterSeconds + 60) * 1000);

/** Instance id → the job id (the provider's) the fleet tagged it with: the harness's `ownJob`. */
async function ownJobs(): Promise<Map<string, number>> {
  return new Map((await f.serving()).map((i) => [i.instanceId, Number(i.jobId.split(':')[1])]));
}

/** The modes, knowing each runner's own job through its instance (refreshed by `learn`). */
function strays(modes: Omit<StrayRunners, 'ownJob'>) {
  let own = new Map<string, number>();
  return {
    modes: { ...modes, ownJob: (name: string) => own.get(instanceIdOfRunnerName(PREFIX, name) ?? '') },
    learn: async () => void (own = await ownJobs()),
  };
}

describe('stray runners against moto: the fleet retries the job left queued', () => {
  it('GitHub: a runner takes another job\'s job; the retry starts a runner that takes the stranded job', { timeout: scaled(120_000) }, async () => {
    let instance = 0;
    const stray = strays({ takesAnotherJob: () => instance++ === 0 });
    const gh: LoopbackGitHub = await startLoopbackGitHub({ organization: ORG, strays: stray.modes });
    close = () => gh.close();
    f = await ReconcileFleet.github(m, gh, SECRET);
    const provider = () => f.githubProvider(gh);
    /** Acts as the runner of the instance: connects and asks for a job, as run.sh does. */
    const runner = async (instanceId: string) => {
      const config = await f.runnerConfig(instanceId);
      if (config.provider !== 'github') throw new Error('not a GitHub runner config');
      const { runnerId, secret } = JSON.parse(Buffer.from(config.jitConfig, 'base64').toString()) as { runnerId: number; secret: string };
      const local = (path: string) => fetch(`${gh.url}/_local/github/runners/${runnerId}/${path}`, { method: 'POST', headers: { authorization: `Bearer ${secret}` } });
      expect((await local('session')).status).toBe(200);
      return ((await (await local('acquire')).json()) as { jobId: number }).jobId;
    };

    // Job A is delivered; job B, of the same labels, is queued at GitHub but its delivery was lost.
    const a = gh.addJob(`${ORG}/app`, ['self-hosted', 'linux']);
    const b = gh.addJob(`${ORG}/app`, ['self-hosted', 'linux']);
    const delivery = githubWorkflowJobQueued({ jobId: a.id, runId: a.runId, repository: a.repository, labels: a.labels }, SECRET);
    expect(((await f.webhook()(functionUrlEvent(delivery))) as { statusCode: number }).statusCode).toBe(202);
    await f.drain(f.scaleUp({ github: provider() }));
    const [first] = await f.serving();
    expect(first?.jobId).toBe(`github:${a.id}`);
    await stray.learn();

    // A's runner takes B: the job it took differs from its own, and A stays queued.
    expect(await runner(first!.instanceId)).toBe(b.id);
    expect(gh.jobs()).toEqual([expect.objectContaining({ id: a.id, status: 'queued' }), expect.objectContaining({ id: b.id, status: 'in_progress' })]);
    expect(gh.jobs()[0]?.runnerName).toBeUndefined();

    // Past retryAfter, the reconciler finds A still queued; scale-up finds its runner busy
    // elsewhere and no other that could take it: it starts another runner.
    const later = afterRetryAfter();
    await f.reconciler({ github: provider() }, { github: { minQueuedSeconds: 0 } })();
    await f.drain(f.scaleUp({ github: provider() }, () => later));
    expect(f.lines.logs('the job is still queued and no runner of its pool could take it: starting another')).toHaveLength(1);
    expect(f.lines.metric('JobsRetried', { Pool: 'linux' })).toBe(1);
    const serving = await f.serving();
    expect(serving.map((i) => i.jobId)).toEqual([`github:${a.id}`, `github:${a.id}`]);
    await stray.learn();

    // The retry's runner takes A: every job served, none twice.
    expect(await runner(serving[1]!.instanceId)).toBe(a.id);
    expect(gh.jobs().map((j) => j.status)).toEqual(['in_progress', 'in_progress']);
    expect(new Set(gh.jobs().map((j) => j.runnerName)).size).toBe(2);
  });

  it('GitLab: a runner dies before taking any; the retry starts a runner that takes the job', { timeout: scaled(120_000) }, async () => {
    let instance = 0;
    const stray = strays({ diesBeforeJob: () => instance++ === 0 });
    const gl: LoopbackGitLab = await startLoopbackGitLab({ groupId: GROUP, strays: stray.modes });
    close = () => gl.close();
    f = await ReconcileFleet.gitlab(m, gl, GROUP, WEBHOOK_TOKEN);
    const provider = () => f.gitlabProvider(gl);
    /** Acts as the runner of the instance: one job request, as run-single makes; the job id it got, if any. */
    const runner = async (instanceId: string) => {
      const config = await f.runnerConfig(instanceId);
      if (config.provider !== 'gitlab') throw new Error('not a GitLab runner config');
      const res = await fetch(`${config.url}/api/v4/jobs/request`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ token: config.token }) });
      return res.status === 201 ? ((await res.json()) as { id: number }).id : undefined;
    };

    const job = gl.addJob(11, ['linux']);
    const delivery = gitlabJobPending({ buildId: job.id, projectId: job.projectId, projectPath: `group-${GROUP}/project-11` }, WEBHOOK_TOKEN);
    expect(((await f.webhook()(functionUrlEvent(delivery))) as { statusCode: number }).statusCode).toBe(202);
    await f.drain(f.scaleUp({ gitlab: provider() }));
    const [first] = await f.serving();
    expect(first?.jobId).toBe(`gitlab:${job.id}`);
    await stray.learn();

    // Its runner dies at its first job request: it takes nothing, and the job stays pending.
    expect(await runner(first!.instanceId)).toBeUndefined();
    expect(gl.jobs()).toEqual([{ ...job, status: 'pending' }]);
    expect(gl.runners()).toEqual([expect.not.objectContaining({ contactedAt: expect.anything() })]);

    const later = afterRetryAfter();
    await f.reconciler({ gitlab: provider() }, { gitlab: { minQueuedSeconds: 0 } })();
    await f.drain(f.scaleUp({ gitlab: provider() }, () => later));
    expect(f.lines.metric('JobsRetried', { Pool: 'linux' })).toBe(1);
    const serving = await f.serving();
    expect(serving.map((i) => i.jobId)).toEqual([`gitlab:${job.id}`, `gitlab:${job.id}`]);

    expect(await runner(serving[1]!.instanceId)).toBe(job.id);
    expect(gl.jobs()).toEqual([expect.objectContaining({ id: job.id, status: 'running' })]);
    expect(gl.runners()).toHaveLength(2);
  });
});
