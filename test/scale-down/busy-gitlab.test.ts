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

/** What a test does around one request of the provider: before it goes out, or after it was served. */
interface Interpose {
  readonly before?: (method: string, path: string, body: string) => Promise<void>;
  /** Throws to lose the answer of a request GitLab has served. */
  readonly after?: (method: string, path: string, body: string) => Promise<void>;
}

function gitlabProvider(interpose: Interpose = {}): GitLabProvider {
  const config = fleet();
  const fetcher: typeof fetch = async (input, init) => {
    const url = new URL(String(input));
    const path = url.pathname.replace(/^\/api\/v4/, '');
    const method = init?.method ?? 'GET';
    const body = typeof init?.body === 'string' ? init.body : '';
    await interpose.before?.(method, path, body);
    const res = await fetch(input, init);
    await interpose.after?.(method, path, body);
    return res;
  };
  return new GitLabProvider({ prefix: PREFIX, gitlab: config.gitlab!, pools: config.pools, token: async () => gl.accessToken, sleep: async () => {}, fetch: fetcher });
}

/** The provider without the pause: the running-jobs reading and the DELETE, as before it. */
function withoutPause(p: GitLabProvider): CiProvider {
  return { ...withoutRunningJobsSignal(p), runnerBusy: (id) => p.runnerBusy(id) };
}

/** gitlab-runner asking for a job with its runner authentication token: the job it got, if any. */
async function poll(secret: string): Promise<{ id: number; token: string } | undefined> {
  const res = await fetch(`${gl.url}/api/v4/jobs/request`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ token: secret }) });
  return res.status === 201 ? ((await res.json()) as { id: number; token: string }) : undefined;
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
  const taken = await poll(reg.secret);
  expect(taken?.id).toBe(job.id);
  return { job, instance, reg, jobToken: taken!.token };
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
    // Asked once, after the pause: running, then canceling.
    expect(gl.requests().filter((r) => r.method === 'GET' && r.path === `/runners/${reg.runnerId}/jobs`)).toHaveLength(2);
    expect(gl.runners()).toEqual([]);
    expect(gl.jobsCutOff()).toEqual([]);
    expect(instance.state).not.toBe('running');
  });
});

/** An idle runner (never contacted) whose instance the sweeps will reclaim, and a job it could take. */
async function idleRunnerWithWaitingJob(provider: GitLabProvider) {
  const job = gl.addJob(PROJECT, ['linux']);
  const instance = aws.addInstance({ state: 'running', tags: { ...standbyTags(), [KEYS.activatedAt]: aws.now.toISOString(), [KEYS.jobId]: `gitlab:${job.id}` } });
  const reg = await provider.createRunner(message(job.id), instance.id, 'linux');
  instance.tags.set(KEYS.runnerId, reg.runnerId);
  return { job, instance, reg };
}

describe('the window between the running-jobs answer and the DELETE: the runner is paused first', () => {
  /** Between the last reading and the DELETE, the runner asks GitLab for a job (what a polling runner read idle would do). */
  function racingRunner(secret: () => string, got: number[]): Interpose {
    return {
      before: async (method, path) => {
        if (method !== 'DELETE' || !/^\/runners\/\d+$/.test(path)) return;
        const job = await poll(secret());
        if (job) got.push(job.id);
      },
    };
  }

  it('a runner that asks for a job just before its DELETE is handed none: no job is cut off, the job waits for another runner', async () => {
    const got: number[] = [];
    let secret = '';
    const provider = gitlabProvider(racingRunner(() => secret, got));
    const { job, instance, reg } = await idleRunnerWithWaitingJob(provider);
    secret = reg.secret;
    await sweeps(provider, 2);
    expect(got).toEqual([]);
    expect(gl.runners()).toEqual([]);
    expect(gl.jobsCutOff()).toEqual([]);
    expect(gl.jobs().find((j) => j.id === job.id)).toMatchObject({ status: 'pending' });
    expect(instance.state).not.toBe('running');
    const order = gl.requests().filter((r) => r.path.startsWith(`/runners/${reg.runnerId}`)).map((r) => `${r.method} ${r.path}`);
    expect(order).toEqual([`PUT /runners/${reg.runnerId}`, `GET /runners/${reg.runnerId}/jobs`, `GET /runners/${reg.runnerId}/jobs`, `DELETE /runners/${reg.runnerId}`]);
  });

  it('without the pause the same race hands the runner the job and the DELETE cuts it off (what the pause prevents)', async () => {
    const got: number[] = [];
    let secret = '';
    const provider = gitlabProvider(racingRunner(() => secret, got));
    const { job, reg } = await idleRunnerWithWaitingJob(provider);
    secret = reg.secret;
    await sweeps(withoutPause(provider), 2);
    expect(got).toEqual([job.id]);
    expect(gl.jobsCutOff()).toEqual([job.id]);
  });

  it('a runner found working after the pause is unpaused and kept', async () => {
    const provider = gitlabProvider();
    const { job, instance, reg } = await runnerMidJob(provider, false);
    await sweeps(provider, 2);
    expectJobRunsOn(job, reg, instance);
    expect(gl.runners()[0]).toMatchObject({ paused: false });
    expect(gl.requests().filter((r) => r.method === 'PUT').map((r) => r.path)).toEqual([`/runners/${reg.runnerId}`, `/runners/${reg.runnerId}`]);
  });

  it('an unpause GitLab applied but whose answer was lost is resolved by reading the runner back', async () => {
    let lose = true;
    const provider = gitlabProvider({
      after: async (method, path, body) => {
        if (method === 'PUT' && /^\/runners\/\d+$/.test(path) && body.includes('"paused":false') && lose) {
          lose = false;
          throw new TypeError('fetch failed');
        }
      },
    });
    const { job, instance, reg } = await runnerMidJob(provider, false);
    await sweeps(provider, 2);
    expectJobRunsOn(job, reg, instance);
    expect(gl.runners()[0]).toMatchObject({ paused: false });
    expect(gl.requests().filter((r) => r.method === 'GET' && r.path === `/runners/${reg.runnerId}`)).toHaveLength(1);
    expect(lines.logs(/^keeping the instance: the provider lists a running job/).map((l) => l.unpause)).toEqual(['applied']);
    expect(lines.logs(/may be left paused/)).toEqual([]);
  });

  it('an unpause GitLab refuses (twice, read back paused each time) is logged as an error naming the runner', async () => {
    const provider = gitlabProvider({
      after: async (method, path, body) => {
        // Once the pause is in, both unpause attempts are refused.
        if (method === 'PUT' && body.includes('"paused":true')) gl.failNext({ method: 'PUT', path: /^\/api\/v4\/runners\/\d+$/ }, 422, 2);
      },
    });
    const { job, instance, reg } = await runnerMidJob(provider, false);
    await sweeps(provider, 2);
    expectJobRunsOn(job, reg, instance);
    expect(gl.runners()[0]).toMatchObject({ paused: true });
    expect(lines.logs(/may be left paused/)).toEqual([expect.objectContaining({ runnerId: reg.runnerId, unpause: 'not-applied' })]);
  });

  it('a pause GitLab applied but whose answer was lost is read back: the runner, idle, is deleted', async () => {
    let lose = true;
    const provider = gitlabProvider({
      after: async (method, path, body) => {
        if (method === 'PUT' && body.includes('"paused":true') && lose) {
          lose = false;
          throw new TypeError('fetch failed');
        }
      },
    });
    const { instance, reg } = await idleRunnerWithWaitingJob(provider);
    await sweeps(provider, 2);
    expect(gl.requests().filter((r) => r.method === 'GET' && r.path === `/runners/${reg.runnerId}`)).toHaveLength(1);
    expect(gl.runners()).toEqual([]);
    expect(instance.state).not.toBe('running');
  });

  it('a pause GitLab refused keeps the runner unpaused and undeleted, and asks nothing more', async () => {
    const provider = gitlabProvider();
    const { instance, reg } = await idleRunnerWithWaitingJob(provider);
    gl.failNext({ method: 'PUT', path: /^\/api\/v4\/runners\/\d+$/ }, 403, 1);
    await sweeps(provider, 2);
    expect(gl.runners()).toEqual([expect.objectContaining({ id: Number(reg.runnerId), paused: false })]);
    expect(gl.requests().filter((r) => r.path === `/runners/${reg.runnerId}/jobs` || r.method === 'DELETE')).toEqual([]);
    expect(lines.logs(/could not be paused/)).toEqual([expect.objectContaining({ why: 'pause-failed' })]);
    expect(instance.state).toBe('running');
  });
});

describe('a job in canceling still runs on its runner (its after_script)', () => {
  it('the runner of a canceling job is kept (GitLab lists it working), until its runner reports the end', async () => {
    const provider = gitlabProvider();
    const { job, instance, reg, jobToken } = await runnerMidJob(provider, false);
    gl.cancelJob(job.id);
    expect(gl.jobs().find((j) => j.id === job.id)).toMatchObject({ status: 'canceling' });
    expect(await provider.runnerBusy(reg.runnerId)).toBe(true);
    await sweeps(provider, 3);
    expect(gl.runners().map((r) => String(r.id))).toEqual([reg.runnerId]);
    expect(gl.jobsCutOff()).toEqual([]);
    expect(instance.state).toBe('running');
    expect(lines.logs(/^keeping the instance: the provider lists a running job/).filter((l) => l.why === 'running-job')).toHaveLength(2);
    // The runner ends its after_script and reports; the job is canceled, the runner idle.
    const end = await fetch(`${gl.url}/api/v4/jobs/${job.id}`, { method: 'PUT', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ token: jobToken, state: 'failed' }) });
    expect(end.headers.get('job-status')).toBe('canceled');
    expect(await provider.runnerBusy(reg.runnerId)).toBe(false);
  });

  it('a GitLab older than the canceling status (it answers that query 400) reads as no canceling job', async () => {
    const config = fleet();
    const old: typeof fetch = async (input, init) =>
      String(input).includes('status=canceling') ? new Response(JSON.stringify({ error: 'status does not have a valid value' }), { status: 400 }) : fetch(input, init);
    const provider = new GitLabProvider({ prefix: PREFIX, gitlab: config.gitlab!, pools: config.pools, token: async () => gl.accessToken, sleep: async () => {}, fetch: old });
    const { reg } = await idleRunnerWithWaitingJob(provider);
    expect(await provider.runnerBusy(reg.runnerId)).toBe(false);
  });
});
