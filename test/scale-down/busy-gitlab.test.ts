import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { GitLabProvider } from '../../lambdas/ci';
import { buildFleetConfig, GitLabRunnerType, JOB_MESSAGE_SCHEMA_VERSION, Provider, type CiProvider, type FleetConfig, type JobMessage } from '../../lambdas/shared/contract';
import { startLoopbackGitLab, type LoopbackGitLab } from '../../local/ci/gitlab-server';
import { FakeAws } from '../support/fake-aws';
import { KEYS, Lines, PREFIX, standbyTags } from '../support/fixtures';
import { BusySweeps } from './busy-sweeps';

/**
 * The scale-down against the loopback GitLab in its `offlineMidJob` mode (a runner in the middle
 * of its job listed `offline`, the GitLab provider's idle reading, and the DELETE accepted, as
 * GitLab always accepts it), through the real GitLab provider. Two protections, each enough on
 * its own: the instance's job-started report, and GitLab's running-jobs list asked just before
 * the DELETE. Without both, the same readings cut the job off, which is what the mode is for.
 */
const GROUP = 42;
const PROJECT = 7;
let gl: LoopbackGitLab;
let aws: FakeAws;
let lines: Lines;
let sweeper: BusySweeps;

beforeEach(async () => {
  aws = new FakeAws();
  lines = new Lines();
  sweeper = new BusySweeps({ aws, lines, fleet });
  gl = await startLoopbackGitLab({ groupId: GROUP, offlineMidJob: true, jobSeconds: 3600 });
});
afterEach(async () => {
  aws.restore();
  await gl.close();
});

function fleet(): FleetConfig {
  return buildFleetConfig({
    prefix: PREFIX,
    gitlab: { url: gl.url, runnerType: GitLabRunnerType.GROUP, scopeId: GROUP },
    pools: [{ name: 'linux', provider: Provider.GITLAB, labels: ['linux'], launchTemplateId: 'lt-0', launchTemplateVersion: '1', subnetIds: ['subnet-1'], instanceTypes: ['t3.micro'] }],
  });
}

function gitlabProvider(): GitLabProvider {
  const config = fleet();
  return new GitLabProvider({ prefix: PREFIX, gitlab: config.gitlab!, pools: config.pools, token: async () => gl.accessToken, sleep: async () => {} });
}

/** The provider as it was before the running-jobs signal: the listing's status alone. */
function withoutRunningJobsSignal(p: GitLabProvider): CiProvider {
  return {
    provider: p.provider,
    createRunner: (job, instanceId, pool) => p.createRunner(job, instanceId, pool),
    deleteRunner: (id) => p.deleteRunner(id),
    listRunners: () => p.listRunners(),
    isJobQueued: (job) => p.isJobQueued(job),
  };
}

function message(jobId: number): JobMessage {
  return {
    schemaVersion: JOB_MESSAGE_SCHEMA_VERSION,
    provider: Provider.GITLAB,
    jobId: `gitlab:${jobId}`,
    providerJobId: String(jobId),
    pool: 'linux',
    owner: `group-${GROUP}`,
    project: `project-${PROJECT}`,
    projectId: PROJECT,
    labels: ['linux'],
    labelsResolved: true,
    traceId: `t-${jobId}`,
    deliveryId: `d-${jobId}`,
    receivedAt: new Date().toISOString(),
  };
}

/** An activated instance whose runner has taken its job at the loopback GitLab. */
async function runnerMidJob(provider: GitLabProvider, reportedStart: boolean) {
  const job = gl.addJob(PROJECT, ['linux']);
  const instance = aws.addInstance({ state: 'running', tags: { ...standbyTags(), [KEYS.activatedAt]: aws.now.toISOString(), [KEYS.jobId]: `gitlab:${job.id}` } });
  const reg = await provider.createRunner(message(job.id), instance.id, 'linux');
  instance.tags.set(KEYS.runnerId, reg.runnerId);
  if (reportedStart) instance.tags.set(KEYS.jobStarted, aws.now.toISOString());
  // Act as gitlab-runner: ask for a job with the runner authentication token (no timing).
  const taken = await fetch(`${gl.url}/api/v4/jobs/request`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ token: reg.secret }) });
  expect(taken.status).toBe(201);
  return { job, instance, reg };
}

/** Sweeps every 5 minutes from 31 minutes after the activation (busy-sweeps.ts). */
const sweeps = (provider: CiProvider, count: number) => sweeper.run(Provider.GITLAB, provider, count);

function expectJobRunsOn(job: { id: number }, reg: { runnerId: string }, instance: { state: string }) {
  expect(gl.runners().map((r) => String(r.id))).toEqual([reg.runnerId]);
  expect(gl.jobs().find((j) => j.id === job.id)).toMatchObject({ status: 'running', runnerId: Number(reg.runnerId) });
  expect(gl.jobsCutOff()).toEqual([]);
  expect(instance.state).toBe('running');
}

describe('scale-down against a GitLab that lists a working runner offline and accepts the DELETE', () => {
  it('the provider reads the working runner as offline (the mode is on), and its running-jobs list says busy', async () => {
    const provider = gitlabProvider();
    const { reg } = await runnerMidJob(provider, false);
    expect(await provider.listRunners()).toEqual([expect.objectContaining({ runnerId: reg.runnerId, status: 'offline' })]);
    expect(await provider.runnerBusy(reg.runnerId)).toBe(true);
  });

  it('both protections: the runner is never deregistered, its job runs on', async () => {
    const provider = gitlabProvider();
    const { job, instance, reg } = await runnerMidJob(provider, true);
    await sweeps(provider, 6);
    expectJobRunsOn(job, reg, instance);
  });

  it('the instance report alone (no running-jobs signal) keeps it', async () => {
    const provider = gitlabProvider();
    const { job, instance, reg } = await runnerMidJob(provider, true);
    await sweeps(withoutRunningJobsSignal(provider), 6);
    expectJobRunsOn(job, reg, instance);
  });

  it('the running-jobs signal alone (no instance report) keeps it, asked at each confirmed idle reading', async () => {
    const provider = gitlabProvider();
    const { job, instance, reg } = await runnerMidJob(provider, false);
    await sweeps(provider, 6);
    expectJobRunsOn(job, reg, instance);
    const asked = gl.requests().filter((r) => r.method === 'GET' && r.path === `/runners/${reg.runnerId}/jobs`);
    // Sweep 1 marks, sweeps 2..6 confirm: each confirmation asks once.
    expect(asked).toHaveLength(5);
    expect(lines.logs(/^keeping the instance: the provider lists a running job/).filter((l) => l.why === 'running-job')).toHaveLength(5);
  });

  it('an unknown answer keeps it: a running-jobs list that fails is not "no running job"', async () => {
    const provider = gitlabProvider();
    const { job, instance, reg } = await runnerMidJob(provider, false);
    gl.failNext({ method: 'GET', path: /\/runners\/\d+\/jobs$/ }, 403, 10);
    await sweeps(provider, 2);
    expectJobRunsOn(job, reg, instance);
    expect(lines.logs(/^keeping the instance: the provider lists a running job/).map((l) => l.why)).toEqual(['unknown']);
  });

  it('without either, two offline readings a window apart deregister it: the job is cut off (what they prevent)', async () => {
    const provider = gitlabProvider();
    const { job, instance, reg } = await runnerMidJob(provider, false);
    // One reading marks only: one wrong reading alone cuts nothing off.
    await sweeps(withoutRunningJobsSignal(provider), 1);
    expectJobRunsOn(job, reg, instance);
    await sweeps(withoutRunningJobsSignal(provider), 1);
    expect(gl.runners()).toEqual([]);
    expect(gl.jobsCutOff()).toEqual([job.id]);
    expect(instance.state).not.toBe('running');
  });
});

describe('the running-jobs signal does not keep an idle GitLab runner', () => {
  it('a runner that never took a job (listed never_contacted, no running job) is deregistered and its instance terminated', async () => {
    const provider = gitlabProvider();
    const job = gl.addJob(PROJECT, ['linux']);
    const instance = aws.addInstance({ state: 'running', tags: { ...standbyTags(), [KEYS.activatedAt]: aws.now.toISOString(), [KEYS.jobId]: `gitlab:${job.id}` } });
    const reg = await provider.createRunner(message(job.id), instance.id, 'linux');
    instance.tags.set(KEYS.runnerId, reg.runnerId);
    expect(await provider.listRunners()).toEqual([expect.objectContaining({ runnerId: reg.runnerId, status: 'never_contacted' })]);
    await sweeps(provider, 2);
    expect(gl.requests().filter((r) => r.method === 'GET' && r.path === `/runners/${reg.runnerId}/jobs`)).toHaveLength(1);
    expect(gl.runners()).toEqual([]);
    expect(gl.jobsCutOff()).toEqual([]);
    expect(instance.state).not.toBe('running');
  });
});
