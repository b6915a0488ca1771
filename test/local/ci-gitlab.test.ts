import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { GetParameterCommand, SSMClient } from '@aws-sdk/client-ssm';
import { mockClient } from 'aws-sdk-client-mock';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createCiProviders, GitLabApiError, GitLabProvider } from '../../lambdas/ci';
import { buildFleetConfig, JOB_MESSAGE_SCHEMA_VERSION, ssmPaths, GitLabRunnerType, Provider, ReuseScope, type CiProvider, type FleetConfig, type JobMessage, type RunnerRegistration } from '../../lambdas/shared/contract';
import type { Delivery } from '../../local/deliveries';
import type { LocalEvent } from '../../local/events';
import { classifyGitLabDelivery } from '../../lambdas/webhook/gitlab-delivery';
import { verifyGitLabToken } from '../../lambdas/webhook/verify';
import { startLoopbackGitLab, type LoopbackGitLab } from '../../local/ci/gitlab-server';
import { runningInGroup, until } from './ci-processes';
import { scaled } from '../support/slowdown';

const GITLAB_RUNNER = resolve(__dirname, '../../local/runner/gitlab-runner');
const PREFIX = 'lgl';
const GROUP = 12;
const PROJECT = 380;

let gl: LoopbackGitLab;
let config: FleetConfig;
let events: LocalEvent[] = [];
let tmp: string;
const ssm = mockClient(SSMClient);

/** The provider as the Lambdas build it: createCiProviders, the token read from SSM. */
function provider(): CiProvider {
  return createCiProviders(config, { ssm: new SSMClient({ region: 'eu-west-1' }) }).gitlab!;
}

let instanceSerial = 0;
const nextInstance = () => `i-0${(++instanceSerial).toString(16).padStart(16, '0')}`;

function message(jobId: number, pool = 'docker', projectId = PROJECT): JobMessage {
  return {
    schemaVersion: JOB_MESSAGE_SCHEMA_VERSION,
    provider: Provider.GITLAB,
    jobId: `gitlab:${jobId}`,
    providerJobId: String(jobId),
    pool,
    owner: 'group',
    project: 'project',
    projectId,
    labels: [],
    labelsResolved: false,
    traceId: `t-${jobId}`,
    deliveryId: `d-${jobId}`,
    receivedAt: new Date().toISOString(),
  };
}

/** The environment templates/start-runner.sh gives the runner (`env -i` plus these). */
const BOOT_ENV = { HOME: tmpdir(), USER: 'nobody', LOGNAME: 'nobody', LANG: 'C.UTF-8', PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' };

/**
 * The fake runner as a real process, with the command line and environment templates/start-runner.sh uses.
 * By default it waits 5 s (times the machine's slowdown) for a job: long enough to find one the test queued.
 */
function runFake(reg: RunnerRegistration, log: string, waitTimeout = Math.ceil(scaled(5_000) / 1000)): Promise<number> {
  const builds = join(tmp, 'builds');
  mkdirSync(builds, { recursive: true });
  const args = ['run-single', '--url', reg.url!, '--token', reg.secret, '--executor', 'shell', '--max-builds', '1', '--wait-timeout', String(waitTimeout), '--builds-dir', builds];
  return new Promise((done, fail) => {
    const child = spawn(GITLAB_RUNNER, args, { env: { ...BOOT_ENV, LOCAL_RUNNER_LOG: log, LOCAL_RUNNER_POLL_SECONDS: '0.1' }, stdio: 'ignore' });
    child.on('error', fail);
    child.on('exit', (code) => done(code ?? -1));
  });
}

async function rejection(p: Promise<unknown>): Promise<GitLabApiError> {
  const e = await p.then(
    () => undefined,
    (err: unknown) => err,
  );
  expect(e).toBeInstanceOf(GitLabApiError);
  return e as GitLabApiError;
}

const jobStatus = (id: number) => gl.jobs().find((j) => j.id === id);

// A fresh GitLab per test: no job or runner of one test can be taken or listed by another.
beforeEach(async () => {
  gl = await startLoopbackGitLab({ groupId: GROUP, onEvent: (e) => events.push(e), jobSeconds: 0.2 });
  const pool = { launchTemplateId: 'lt-0', launchTemplateVersion: '1', subnetIds: ['subnet-1'], instanceTypes: ['t3.micro'] };
  config = buildFleetConfig({
    prefix: PREFIX,
    gitlab: { url: gl.url, runnerType: GitLabRunnerType.GROUP, scopeId: GROUP },
    pools: [
      { name: 'docker', provider: Provider.GITLAB, labels: ['docker', 'linux'], runUntagged: false, ...pool },
      { name: 'any', provider: Provider.GITLAB, labels: ['linux'], runUntagged: true, ...pool },
    ],
  });
  ssm.on(GetParameterCommand, { Name: ssmPaths(PREFIX).gitlab.token }).resolves({ Parameter: { Value: gl.accessToken } });
});
afterEach(async () => {
  await gl.close();
  events = [];
});
beforeAll(() => {
  tmp = mkdtempSync(join(tmpdir(), 'ci-gitlab-'));
});
afterAll(() => {
  ssm.restore();
  rmSync(tmp, { recursive: true, force: true });
});

describe('loopback GitLab through the real provider and the fake gitlab-runner', () => {
  it('run-single takes the OLDEST pending job whose tags the runner has, finishes it and exits 0; the runner stays until DELETE', async () => {
    const p = provider();
    const untagged = gl.addJob(PROJECT, []);
    const gpu = gl.addJob(PROJECT, ['gpu']);
    const older = gl.addJob(PROJECT, ['docker']);
    const launchedFor = gl.addJob(PROJECT, ['docker', 'linux']);
    expect(await p.isJobQueued(message(older.id))).toBe(true);
    expect(await p.resolveLabels?.(message(launchedFor.id))).toEqual(['docker', 'linux']);

    const reg = await p.createRunner(message(launchedFor.id), nextInstance(), 'docker');
    expect(reg.url).toBe(gl.url);
    expect(reg.secret).toMatch(/^glrt-/);
    expect(gl.runners()).toEqual([
      { id: Number(reg.runnerId), description: reg.name, tagList: ['docker', 'linux'], runUntagged: false, runnerType: GitLabRunnerType.GROUP, groupId: GROUP, token: reg.secret, paused: false },
    ]);
    expect(await p.listRunners()).toEqual([{ runnerId: reg.runnerId, name: reg.name, status: 'never_contacted' }]);

    const log = join(tmp, 'assign.log');
    expect(await runFake(reg, log)).toBe(0);

    // GitLab's assignment: the oldest job the runner can take, not the one it was created for.
    expect(jobStatus(older.id)).toEqual({ ...older, status: 'success', runnerId: Number(reg.runnerId), runnerScope: `group_type:${GROUP}`, startedAt: expect.any(String) });
    expect(jobStatus(launchedFor.id)?.status).toBe('pending');
    expect(jobStatus(untagged.id)?.status).toBe('pending'); // the runner does not run untagged jobs
    expect(jobStatus(gpu.id)?.status).toBe('pending');
    expect(await p.isJobQueued(message(older.id))).toBe(false);
    expect(events).toEqual([expect.objectContaining({ kind: 'job-done', provider: Provider.GITLAB, ciJobId: String(older.id), runnerName: reg.name })]);
    // Still registered after run-single exited: the control plane deletes it.
    expect(gl.runners()).toEqual([expect.objectContaining({ id: Number(reg.runnerId), contactedAt: expect.any(String) })]);
    expect(await p.listRunners()).toEqual([{ runnerId: reg.runnerId, name: reg.name, status: 'online' }]);
    await p.deleteRunner(reg.runnerId);
    expect(gl.runners()).toEqual([]);
    expect(await p.listRunners()).toEqual([]);
    await p.deleteRunner(reg.runnerId); // 404 counts as deleted

    const lines = readFileSync(log, 'utf8');
    expect(lines).toMatch(new RegExp(`received job=${older.id}`));
    expect(lines).toMatch(/processed its build limit, so now exiting/);
    expect(lines).not.toMatch(/trace not accepted/);
    expect(lines).not.toContain(reg.secret.slice('glrt-'.length, 'glrt-'.length + 6));
  });

  it('two runners at once take different jobs; a run-untagged runner takes the untagged job', async () => {
    const p = provider();
    const untagged = gl.addJob(PROJECT, []);
    const docker = gl.addJob(PROJECT, ['docker']);
    const r1 = await p.createRunner(message(untagged.id, 'any'), nextInstance(), 'any');
    const r2 = await p.createRunner(message(docker.id), nextInstance(), 'docker');
    expect(await Promise.all([runFake(r1, join(tmp, 'r1.log')), runFake(r2, join(tmp, 'r2.log'))])).toEqual([0, 0]);
    expect(jobStatus(untagged.id)).toMatchObject({ status: 'success', runnerId: Number(r1.runnerId) });
    expect(jobStatus(docker.id)).toMatchObject({ status: 'success', runnerId: Number(r2.runnerId) });
    expect(events.map((e) => e.runnerName).sort()).toEqual([r1.name, r2.name].sort());
    await p.deleteRunner(r1.runnerId);
    await p.deleteRunner(r2.runnerId);
  });

  it('no job within --wait-timeout: run-single exits 0 as the real one does, the registration stays', async () => {
    const p = provider();
    const reg = await p.createRunner(message(1), nextInstance(), 'docker');
    const log = join(tmp, 'idle.log');
    expect(await runFake(reg, log, 1)).toBe(0);
    expect(readFileSync(log, 'utf8')).toMatch(/has not received a job in 1 seconds, so now exiting/);
    expect(gl.runners().map((r) => r.id)).toEqual([Number(reg.runnerId)]);
    await p.deleteRunner(reg.runnerId);
  });

  it('a deleted runner is refused (403) and takes no job; it keeps asking until its wait timeout, as the real one does', async () => {
    const p = provider();
    const job = gl.addJob(PROJECT, ['docker']);
    const reg = await p.createRunner(message(job.id), nextInstance(), 'docker');
    await p.deleteRunner(reg.runnerId);
    const log = join(tmp, 'deleted.log');
    expect(await runFake(reg, log, 1)).toBe(0);
    expect(readFileSync(log, 'utf8')).toMatch(/forbidden \(runner token refused\)/);
    expect(jobStatus(job.id)?.status).toBe('pending');
  });

  it('reuse: a scoped runner of a group fleet is a project_type runner of the job\'s project that never takes another project\'s job of the same tags', async () => {
    const reusable = { ...config, pools: config.pools.map((p) => ({ ...p, reuse: { scope: ReuseScope.PROJECT, maxJobs: 5, maxAgeSeconds: 3600, cacheDirectories: [] } })) };
    const p = createCiProviders(reusable, { ssm: new SSMClient({ region: 'eu-west-1' }) }).gitlab!;
    // Older, same tags, another project: GitLab hands out by tags, the oldest first.
    const foreign = gl.addJob(PROJECT, ['docker', 'linux']);
    const own = gl.addJob(999, ['docker', 'linux']);
    const reg = await p.createRunner(message(own.id, 'docker', 999), nextInstance(), 'docker', { scoped: true });
    expect(gl.runners()).toEqual([expect.objectContaining({ id: Number(reg.runnerId), runnerType: 'project_type', projectId: 999 })]);
    // The group's list does not show a project runner; the reusable fleet lists the user's own too.
    expect(await provider().listRunners()).toEqual([]);
    expect((await p.listRunners()).map((r) => r.runnerId)).toEqual([reg.runnerId]);
    expect(await runFake(reg, join(tmp, 'scoped.log'))).toBe(0);
    expect(jobStatus(own.id)).toMatchObject({ status: 'success', runnerId: Number(reg.runnerId) });
    expect(jobStatus(foreign.id)?.status).toBe('pending');
    await p.deleteRunner(reg.runnerId);
    // A group runner of the same tags does take it: by tags only.
    const groupReg = await p.createRunner(message(foreign.id, 'docker'), nextInstance(), 'docker');
    expect(await runFake(groupReg, join(tmp, 'group.log'))).toBe(0);
    expect(jobStatus(foreign.id)).toMatchObject({ status: 'success', runnerId: Number(groupReg.runnerId) });
    await p.deleteRunner(groupReg.runnerId);
  });

  it('reuse: a job without a project id gets no scoped runner (refused before GitLab is asked)', async () => {
    const p = provider();
    const { projectId: _, ...job } = message(1, 'docker');
    await expect(p.createRunner(job, nextInstance(), 'docker', { scoped: true })).rejects.toThrow(/no project id/);
    expect(gl.runners()).toEqual([]);
  });

  it('a project runner takes only jobs of its project', async () => {
    const projectConfig = { ...config, gitlab: { url: gl.url, runnerType: GitLabRunnerType.PROJECT as const, scopeId: 999 } };
    const p = createCiProviders(projectConfig, { ssm: new SSMClient({ region: 'eu-west-1' }) }).gitlab!;
    const other = gl.addJob(PROJECT, ['docker']);
    const own = gl.addJob(999, ['docker']);
    const reg = await p.createRunner(message(own.id, 'docker', 999), nextInstance(), 'docker');
    expect(await runFake(reg, join(tmp, 'project.log'))).toBe(0);
    // The older job belongs to another project: the project runner skips it.
    expect(jobStatus(own.id)).toMatchObject({ status: 'success', runnerId: Number(reg.runnerId) });
    expect(jobStatus(other.id)?.status).toBe('pending');
    expect((await p.listRunners()).map((r) => r.runnerId)).toEqual([reg.runnerId]);
    expect(await provider().listRunners()).toEqual([]); // not a group runner
    await p.deleteRunner(reg.runnerId);
  });

  it('failNext: a 5xx once on a list is retried; on POST /user/runners it is not (GitLab may have created it); on the runner API the runner asks again', async () => {
    const waits: number[] = [];
    const p = new GitLabProvider({
      prefix: PREFIX,
      gitlab: config.gitlab!,
      pools: config.pools,
      token: async () => gl.accessToken,
      sleep: async (ms) => {
        waits.push(ms);
      },
    });
    gl.failNext({ method: 'GET', path: /^\/api\/v4\/groups\/12\/runners$/ }, 502);
    expect(await p.listRunners()).toEqual([]);
    expect(waits).toEqual([500]);

    gl.failNext({ method: 'POST', path: /^\/api\/v4\/user\/runners$/ }, 500);
    expect((await rejection(p.createRunner(message(1), nextInstance(), 'docker'))).status).toBe(500);
    expect(waits).toEqual([500]);
    expect(gl.runners()).toEqual([]);

    const job = gl.addJob(PROJECT, ['linux']);
    const reg = await p.createRunner(message(job.id), nextInstance(), 'any');
    gl.failNext({ method: 'POST', path: /^\/api\/v4\/jobs\/request$/ }, 503);
    gl.failNext({ method: 'PUT', path: /^\/api\/v4\/jobs\/\d+$/ }, 502);
    const log = join(tmp, 'faults.log');
    expect(await runFake(reg, log)).toBe(0);
    expect(jobStatus(job.id)?.status).toBe('success');
    const lines = readFileSync(log, 'utf8');
    expect(lines).toMatch(/Checking for jobs\.\.\. failed \(HTTP 503\)/);
    expect(lines).toMatch(/updating job \d+ to running failed \(HTTP 502, attempt 1\)/);
    await p.deleteRunner(reg.runnerId);

    gl.failNext({ method: 'DELETE', path: /^\/api\/v4\/runners\/\d+$/ }, 503, 3);
    const other = await p.createRunner(message(1), nextInstance(), 'docker');
    expect((await rejection(p.deleteRunner(other.runnerId))).status).toBe(503);
    expect(waits).toEqual([500, 500, 1000]);
    await p.deleteRunner(other.runnerId);

    // A rate limit once: waited out for the Retry-After it names (plus the provider's second).
    gl.failNext({ method: 'GET', path: /\/runners$/ }, 429);
    expect(await p.listRunners()).toEqual([]);
    expect(waits).toEqual([500, 500, 1000, 2000]);
  });

  it('announces a job its runner takes to the webhook: a Job Hook with build_status running, its runner object and times, that the webhook reads as this job started by this runner', async () => {
    const sent: Delivery[] = [];
    gl.setWebhook({ secret: 'hook-token', send: async (d) => (sent.push(d), 200) });
    const post = (path: string, body: unknown) => fetch(`${gl.url}/api/v4${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    const job = gl.addJob(PROJECT, ['docker']);
    const reg = await provider().createRunner(message(job.id), nextInstance(), 'docker');
    expect((await post('/jobs/request', { token: reg.secret })).status).toBe(201);
    await gl.hooksSettled();
    expect(sent).toHaveLength(1);
    const d = sent[0]!;
    expect(d.headers).toMatchObject({ 'x-gitlab-event': 'Job Hook', 'idempotency-key': d.deliveryId });
    expect(verifyGitLabToken(d.headers['x-gitlab-token'], 'hook-token')).toEqual({ ok: true });
    const payload = JSON.parse(d.body) as Record<string, unknown>;
    expect(payload).toMatchObject({ object_kind: 'build', build_id: job.id, build_status: 'running', project_id: PROJECT, runner: { id: Number(reg.runnerId), description: reg.name, tags: ['docker', 'linux'] } });
    expect(payload.build_started_at_iso).toEqual(expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/));
    const classified = classifyGitLabDelivery(payload, config.gitlab);
    expect(classified).toMatchObject({ kind: 'ignore', reason: 'status-running', started: { providerJobId: String(job.id), runnerName: reg.name, labels: ['docker', 'linux'] } });
    // No job left: the next request announces nothing.
    expect((await post('/jobs/request', { token: reg.secret })).status).toBe(204);
    await gl.hooksSettled();
    expect(sent).toHaveLength(1);
    await provider().deleteRunner(reg.runnerId);
  });

  it('refuses bad credentials like GitLab: 401 for a wrong PRIVATE-TOKEN, 403 for a wrong runner or job token', async () => {
    const wrong = new GitLabProvider({ prefix: PREFIX, gitlab: config.gitlab!, pools: config.pools, token: async () => 'glpat-wrong', sleep: async () => undefined });
    expect((await rejection(wrong.listRunners())).status).toBe(401);
    expect((await rejection(wrong.createRunner(message(1), nextInstance(), 'docker'))).status).toBe(401);
    expect((await fetch(`${gl.url}/api/v4/groups/${GROUP}/runners`)).status).toBe(401);

    const post = (path: string, body: unknown, method = 'POST') => fetch(`${gl.url}/api/v4${path}`, { method, headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    expect((await post('/jobs/request', { token: 'glrt-guessed' })).status).toBe(403);
    const job = gl.addJob(PROJECT, ['docker', 'linux', 'x']);
    const reg = await provider().createRunner(message(job.id), nextInstance(), 'docker');
    expect((await post('/runners/verify', { token: reg.secret })).status).toBe(200);
    // No job for these tags: 204, and the runner now counts as contacted.
    expect((await post('/jobs/request', { token: reg.secret })).status).toBe(204);
    const docker = gl.addJob(PROJECT, ['docker']);
    const taken = await post('/jobs/request', { token: reg.secret });
    expect(taken.status).toBe(201);
    const { id, token } = (await taken.json()) as { id: number; token: string };
    expect(id).toBe(docker.id);
    // The trace: appended only at its current end, named by Content-Range, with the job token.
    const patch = (headers: Record<string, string>, text: string) => fetch(`${gl.url}/api/v4/jobs/${id}/trace`, { method: 'PATCH', headers: { 'content-type': 'text/plain', ...headers }, body: text });
    expect((await patch({ 'job-token': token }, 'line\n')).status).toBe(400);
    expect((await patch({ 'job-token': 'glcbt-guessed', 'content-range': '0-5' }, 'line\n')).status).toBe(403);
    const first = await patch({ 'job-token': token, 'content-range': '0-5' }, 'line\n');
    expect([first.status, first.headers.get('range'), first.headers.get('job-status')]).toEqual([202, '0-5', 'running']);
    const gap = await patch({ 'job-token': token, 'content-range': '9-14' }, 'more\n');
    expect([gap.status, gap.headers.get('range')]).toEqual([416, '0-5']);
    expect((await patch({ 'job-token': token, 'content-range': '5-10' }, 'more\n')).headers.get('range')).toBe('0-10');
    expect((await post(`/jobs/${id}`, { token: 'glcbt-guessed', state: 'success' }, 'PUT')).status).toBe(403);
    expect((await post(`/jobs/${id}`, { token: reg.secret, state: 'success' }, 'PUT')).status).toBe(403);
    expect(jobStatus(id)?.status).toBe('running');
    expect((await post(`/jobs/${id}`, { token, state: 'success' }, 'PUT')).status).toBe(200);
    expect(jobStatus(id)?.status).toBe('success');
    expect((await post(`/jobs/${id}`, { token, state: 'success' }, 'PUT')).status).toBe(403); // no longer running
    // A failed job: GitLab takes the state; the job is not done, so no job-done.
    const failing = gl.addJob(PROJECT, ['docker']);
    const next = await post('/jobs/request', { token: reg.secret });
    const { token: failingToken } = (await next.json()) as { token: string };
    expect((await post(`/jobs/${failing.id}`, { token: failingToken, state: 'bogus' }, 'PUT')).status).toBe(400);
    expect((await post(`/jobs/${failing.id}`, { token: failingToken, state: 'failed', failure_reason: 'script_failure', exit_code: 1 }, 'PUT')).status).toBe(200);
    expect(jobStatus(failing.id)?.status).toBe('failed');
    expect(events.map((e) => e.ciJobId)).toEqual([String(id)]);
    await provider().deleteRunner(reg.runnerId);
  });

  it('gitlab-runner is shellcheck-clean and refuses command lines run-single would refuse', async () => {
    expect(() => execFileSync('shellcheck', [GITLAB_RUNNER])).not.toThrow();
    const log = join(tmp, 'usage.log');
    const exitOf = (args: string[]) =>
      new Promise<number>((done) => spawn(GITLAB_RUNNER, args, { env: { ...BOOT_ENV, LOCAL_RUNNER_LOG: log }, stdio: 'ignore' }).on('exit', (code) => done(code ?? -1)));
    const good = ['--url', gl.url, '--token', 'glrt-x', '--executor', 'shell', '--max-builds', '1', '--wait-timeout', '1'];
    expect(await exitOf(['run', ...good])).toBe(1);
    expect(await exitOf(['run-single', ...good, '--bogus', 'x'])).toBe(1);
    expect(await exitOf(['run-single', ...good.slice(2)])).toBe(1);
    expect(await exitOf(['run-single', ...good.slice(0, 4)])).toBe(1);
    expect(await exitOf(['run-single', ...good.slice(0, 4), '--executor', 'ssh'])).toBe(1);
    expect(await exitOf(['run-single', ...good.slice(0, 4), '--executor', 'docker'])).toBe(1);
    expect(await exitOf(['run-single', ...good.slice(0, 4), '--executor', 'docker', '--docker-image', 'alpine:3', '--docker-pull-policy', 'sometimes'])).toBe(1);
    expect(readFileSync(log, 'utf8')).toMatch(/Missing URL[\s\S]*Missing Executor[\s\S]*Unknown executor: ssh[\s\S]*the docker executor needs --docker-image[\s\S]*unknown pull policy sometimes/);
  });

  it('pages runner lists with x-next-page and a link header; the provider reads every page', async () => {
    const p = provider();
    const regs = [];
    for (let i = 0; i < 3; i++) regs.push(await p.createRunner(message(1), nextInstance(), 'docker'));
    const res = await fetch(`${gl.url}/api/v4/groups/${GROUP}/runners?type=group_type&per_page=2&page=1`, { headers: { 'private-token': gl.accessToken } });
    expect(res.status).toBe(200);
    expect(await res.json()).toHaveLength(2);
    expect(res.headers.get('x-next-page')).toBe('2');
    expect(res.headers.get('x-total')).toBe('3');
    expect(res.headers.get('link')).toContain(`<${gl.url}/api/v4/groups/${GROUP}/runners?type=group_type&per_page=2&page=2>; rel="next"`);
    expect((await p.listRunners()).map((r) => r.name).sort()).toEqual(regs.map((r) => r.name).sort());
    for (const r of regs) await p.deleteRunner(r.runnerId);
  });
});

describe("GitLab's documented query bounds (local/ci/gitlab-bounds.ts)", () => {
  const get = async (path: string, token = gl.accessToken) => {
    const res = await fetch(`${gl.url}/api/v4${path}`, { headers: { 'private-token': token } });
    return { status: res.status, body: (await res.json()) as unknown, perPage: res.headers.get('x-per-page') };
  };
  const refusal = (error: string) => ({ status: 400, body: { error }, perPage: null });

  it('hook events: per_page 1..20 on project and group hooks (lib/api/hooks/events.rb); 21, 100 and 0 are a 400', async () => {
    for (const hooks of [`/groups/${GROUP}/hooks/1`, `/projects/${PROJECT}/hooks/1`]) {
      for (const perPage of [21, 100, 0, -1]) expect(await get(`${hooks}/events?per_page=${perPage}`)).toEqual(refusal('per_page does not have a valid value'));
      expect(await get(`${hooks}/events?status=999`)).toEqual(refusal('status does not have a valid value'));
    }
    // Within the bounds: served (the project hook is not the fleet's: 404 after validation, as Grape checks first).
    expect(await get(`/groups/${GROUP}/hooks/1/events?per_page=20&page=2&status=server_failure,200`)).toMatchObject({ status: 200, perPage: '20' });
    expect((await get(`/projects/${PROJECT}/hooks/1/events?per_page=20`)).status).toBe(404);
    // Authentication comes first.
    expect((await get(`/groups/${GROUP}/hooks/1/events?per_page=21`, 'glpat-wrong')).status).toBe(401);
  });

  it('other lists: per_page above 100 is served as 100, not refused (Kaminari max_per_page); 0, a non-integer page and values outside an enum are a 400', async () => {
    for (let i = 0; i < 101; i++) gl.addJob(PROJECT, ['docker']);
    const clamped = await get(`/projects/${PROJECT}/jobs?scope[]=pending&per_page=101`);
    expect([clamped.status, clamped.perPage, (clamped.body as unknown[]).length]).toEqual([200, '100', 100]);
    expect(await get(`/projects/${PROJECT}/jobs?scope[]=pending&per_page=0`)).toEqual(refusal('per_page has a value not allowed'));
    expect(await get(`/projects/${PROJECT}/jobs?page=first`)).toEqual(refusal('page is invalid'));
    expect(await get(`/projects/${PROJECT}/jobs?scope[]=pending&scope[]=queued`)).toEqual(refusal('scope does not have a valid value'));
    expect(await get(`/groups/${GROUP}/runners?type=group`)).toEqual(refusal('type does not have a valid value'));
    expect(await get(`/runners/1/jobs?status=busy`)).toEqual(refusal('status does not have a valid value'));
    expect(await get(`/groups/${GROUP}/projects?include_subgroups=maybe`)).toEqual(refusal('include_subgroups is invalid'));
  });

  it("the runner lists (lib/api/ci/runners.rb): the deprecated scope where declared, version_prefix's regexp, tag_list free; the group's list ignores scope", async () => {
    const lists = ['/runners', '/runners/all', `/projects/${PROJECT}/runners`, `/groups/${GROUP}/runners`];
    for (const list of lists) {
      expect(await get(`${list}?status=busy`)).toEqual(refusal('status does not have a valid value'));
      expect(await get(`${list}?paused=maybe`)).toEqual(refusal('paused is invalid'));
      expect(await get(`${list}?version_prefix=v16`)).toEqual(refusal('version_prefix is invalid'));
      expect((await get(`${list}?version_prefix=16.&tag_list=docker,linux&paused=false&status=online&type=project_type`)).status).toBe(200);
    }
    // AVAILABLE_SCOPES (legacy types, types, statuses) on the instance's and a project's list.
    for (const list of ['/runners/all', `/projects/${PROJECT}/runners`]) {
      for (const scope of ['specific', 'shared', 'project_type', 'paused', 'never_contacted']) expect((await get(`${list}?scope=${scope}`)).status).toBe(200);
      expect(await get(`${list}?scope=mine`)).toEqual(refusal('scope does not have a valid value'));
    }
    // The owned list then takes the statuses alone (filter_runners: 400 "Scope contains invalid value").
    expect((await get('/runners?scope=online')).status).toBe(200);
    for (const scope of ['specific', 'project_type', 'mine']) expect((await get(`/runners?scope=${scope}`)).status).toBe(400);
    // Not declared on the group's list: Grape ignores it.
    expect((await get(`/groups/${GROUP}/runners?scope=mine`)).status).toBe(200);
  });
});

/** A fake gitlab-runner at work on a 60 s job of a GitLab of its own (in `modes`): past every request of the job's start. */
interface RunnerAtWork {
  readonly gitlab: LoopbackGitLab;
  readonly provider: GitLabProvider;
  readonly job: { readonly id: number };
  readonly reg: RunnerRegistration;
  readonly child: ChildProcess;
  readonly exited: Promise<unknown>;
  readonly log: string;
}

/**
 * Runs `body` with a runner at work, spawned as templates/start-runner.sh runs it, in a process
 * group of its own (so that whatever it left running can be seen); then kills what is left
 * (a failed expectation must not leave the runner running) and closes its GitLab.
 */
async function withRunnerAtWork(modes: { readonly offlineMidJob?: boolean }, logName: string, body: (w: RunnerAtWork) => Promise<void>): Promise<void> {
  const gitlab = await startLoopbackGitLab({ groupId: GROUP, jobSeconds: 60, ...modes });
  let child: ChildProcess | undefined;
  try {
    const p = new GitLabProvider({ prefix: PREFIX, gitlab: { ...config.gitlab!, url: gitlab.url }, pools: config.pools, token: async () => gitlab.accessToken, sleep: async () => undefined });
    const job = gitlab.addJob(PROJECT, ['docker']);
    const reg = await p.createRunner(message(job.id), nextInstance(), 'docker');
    const builds = join(tmp, 'builds');
    mkdirSync(builds, { recursive: true });
    const args = ['run-single', '--url', reg.url!, '--token', reg.secret, '--executor', 'shell', '--max-builds', '1', '--wait-timeout', '5', '--builds-dir', builds];
    const log = join(tmp, logName);
    child = spawn(GITLAB_RUNNER, args, { env: { ...BOOT_ENV, LOCAL_RUNNER_LOG: log, LOCAL_RUNNER_POLL_SECONDS: '0.1' }, stdio: 'ignore', detached: true });
    const spawned = child;
    const exited = new Promise<unknown>((done) => spawned.on('exit', done));
    await until(() => existsSync(log) && readFileSync(log, 'utf8').includes(`Running job ${job.id} for 60s`));
    await body({ gitlab, provider: p, job, reg, child, exited, log });
  } finally {
    if (child?.exitCode === null && child.signalCode === null) process.kill(-child.pid!, 'SIGKILL');
    await gitlab.close();
  }
}

describe('a fake gitlab-runner killed mid-job', () => {
  it('leaves no process behind on SIGTERM; the runner stays registered until DELETE, as GitLab keeps it', async () => {
    await withRunnerAtWork({}, 'killed.log', async ({ gitlab, provider: p, job, reg, child, exited, log }) => {
      // At work: the signal meets the runner itself.
      process.kill(child.pid!, 'SIGTERM');
      await exited;
      expect(runningInGroup(child.pid!)).toEqual([]);
      expect(readFileSync(log, 'utf8')).toMatch(new RegExp(`stopped by a signal during job ${job.id}`));
      expect(gitlab.runners().map((r) => r.id)).toEqual([Number(reg.runnerId)]);
      await p.deleteRunner(reg.runnerId);
      expect(gitlab.runners()).toEqual([]);
    });
  });
});

describe("a runner's jobs (GET /runners/:id/jobs) and the offlineMidJob mode", () => {
  it('lists the jobs a runner ran by status, newest first; a bad status is 400 and an unknown runner 404', async () => {
    const p = provider() as GitLabProvider;
    const job = gl.addJob(PROJECT, ['docker']);
    const reg = await p.createRunner(message(job.id), nextInstance(), 'docker');
    expect(await p.runnerBusy(reg.runnerId)).toBe(false);
    expect(await runFake(reg, join(tmp, 'jobs.log'))).toBe(0);
    expect(await p.runnerBusy(reg.runnerId)).toBe(false);
    const get = (query: string, id = reg.runnerId) => fetch(`${gl.url}/api/v4/runners/${id}/jobs${query}`, { headers: { 'private-token': gl.accessToken } });
    const done = await get('?status=success');
    expect(done.status).toBe(200);
    expect(await done.json()).toEqual([expect.objectContaining({ id: job.id, status: 'success', pipeline: expect.objectContaining({ project_id: PROJECT }) })]);
    expect(await (await get('?status=pending')).json()).toEqual([]);
    expect((await get('?status=finished')).status).toBe(400);
    expect((await get('', '999999')).status).toBe(404);
    expect((await rejection(p.runnerBusy('999999'))).status).toBe(404);
    expect(gl.jobsCutOff()).toEqual([]);
  });

  it('offlineMidJob: a runner at work lists offline, its running job is listed, and its DELETE is accepted, cutting the job off', async () => {
    await withRunnerAtWork({ offlineMidJob: true }, 'offline.log', async ({ gitlab, provider: p, job, reg }) => {
      expect(await p.listRunners()).toEqual([{ runnerId: reg.runnerId, name: reg.name, status: 'offline' }]);
      expect(await p.runnerBusy(reg.runnerId)).toBe(true);
      await p.deleteRunner(reg.runnerId);
      expect(gitlab.runners()).toEqual([]);
      expect(gitlab.jobsCutOff()).toEqual([job.id]);
      // GitLab leaves the job running until its stuck-jobs worker drops it; this server does not run that worker.
      expect(gitlab.jobs().find((j) => j.id === job.id)?.status).toBe('running');
    });
  });
});

describe('stray runners: the retry cases of issue 11 as loopback modes', () => {
  /** A GitLab whose runners' own jobs the test names (runner description → job id), in the given modes. */
  async function strayGitLab(own: Map<string, number>, modes: { takesAnotherJob?: (name: string) => boolean; diesBeforeJob?: (name: string) => boolean }): Promise<GitLabProvider> {
    const stray = await startLoopbackGitLab({ groupId: GROUP, jobSeconds: 0.2, strays: { ownJob: (name) => own.get(name), ...modes } });
    await gl.close();
    gl = stray;
    return new GitLabProvider({ prefix: PREFIX, gitlab: { ...config.gitlab!, url: gl.url }, pools: config.pools, token: async () => gl.accessToken, sleep: async () => undefined });
  }

  it('takesAnotherJob: run-single takes another pending job of its tags, not the one it was made for; with none other waiting, its own', async () => {
    const own = new Map<string, number>();
    const p = await strayGitLab(own, { takesAnotherJob: () => true });
    // Its own job is the oldest: GitLab's own choice would be it.
    const mine = gl.addJob(PROJECT, ['docker']);
    const other = gl.addJob(PROJECT, ['docker']);
    const reg = await p.createRunner(message(mine.id), nextInstance(), 'docker');
    own.set(reg.name, mine.id);
    expect(await runFake(reg, join(tmp, 'stray.log'))).toBe(0);
    expect(jobStatus(other.id)).toMatchObject({ status: 'success', runnerId: Number(reg.runnerId) });
    expect(jobStatus(mine.id)).toEqual({ ...mine, status: 'pending' });
    expect(await p.isJobQueued(message(mine.id))).toBe(true);

    const second = await p.createRunner(message(mine.id), nextInstance(), 'docker');
    own.set(second.name, mine.id);
    expect(await runFake(second, join(tmp, 'stray-2.log'))).toBe(0);
    expect(jobStatus(mine.id)).toMatchObject({ status: 'success', runnerId: Number(second.runnerId) });
    for (const r of [reg, second]) await p.deleteRunner(r.runnerId);
  });

  it('diesBeforeJob: the runner takes nothing and never counts as contacted; its job stays pending and its registration stays', async () => {
    const dying = new Set<string>();
    const p = await strayGitLab(new Map(), { diesBeforeJob: (name) => dying.has(name) });
    const job = gl.addJob(PROJECT, ['docker']);
    const reg = await p.createRunner(message(job.id), nextInstance(), 'docker');
    dying.add(reg.name);
    const log = join(tmp, 'dies.log');
    expect(await runFake(reg, log, 1)).toBe(0);
    expect(readFileSync(log, 'utf8')).not.toMatch(/received job/);
    expect(jobStatus(job.id)).toEqual({ ...job, status: 'pending' });
    expect(await p.listRunners()).toEqual([{ runnerId: reg.runnerId, name: reg.name, status: 'never_contacted' }]);

    // The job was there to take: a runner that does not die takes it.
    const next = await p.createRunner(message(job.id), nextInstance(), 'docker');
    expect(await runFake(next, join(tmp, 'lives.log'))).toBe(0);
    expect(jobStatus(job.id)).toMatchObject({ status: 'success', runnerId: Number(next.runnerId) });
    for (const r of [reg, next]) await p.deleteRunner(r.runnerId);
  });
});

describe('several groups and projects in one fleet (pool gitlabGroupId / gitlabProjectId)', () => {
  const OTHER_GROUP = 13;
  const OTHER_PROJECT = 480;
  const FOREIGN_GROUP = 14;
  let two: LoopbackGitLab;
  let twoConfig: FleetConfig;
  const pool = { launchTemplateId: 'lt-0', launchTemplateVersion: '1', subnetIds: ['subnet-1'], instanceTypes: ['t3.micro'] };
  beforeEach(async () => {
    two = await startLoopbackGitLab({ groupId: GROUP, groups: [{ id: OTHER_GROUP, projectIds: [OTHER_PROJECT] }], forbidden: { groupIds: [FOREIGN_GROUP] }, onEvent: (e) => events.push(e), jobSeconds: 0.2 });
    twoConfig = buildFleetConfig({
      prefix: PREFIX,
      gitlab: { url: two.url, runnerType: GitLabRunnerType.GROUP, scopeId: GROUP },
      pools: [
        // The other group's runners have every tag the home group's job asks for: only the group keeps them apart.
        { name: 'home', provider: Provider.GITLAB, labels: ['linux'], ...pool },
        { name: 'other', provider: Provider.GITLAB, labels: ['linux', 'other'], gitlabGroupId: OTHER_GROUP, ...pool },
        { name: 'app', provider: Provider.GITLAB, labels: ['app'], gitlabProjectId: PROJECT, ...pool },
      ],
    });
    ssm.on(GetParameterCommand, { Name: ssmPaths(PREFIX).gitlab.token }).resolves({ Parameter: { Value: two.accessToken } });
  });
  afterEach(() => two.close());
  const twoProvider = () => createCiProviders(twoConfig, { ssm: new SSMClient({ region: 'eu-west-1' }) }).gitlab!;

  it("registers each pool's runners in its own scope, lists every scope's once, and each runner takes its own group's job", async () => {
    const p = twoProvider();
    const home = two.addJob(PROJECT, ['linux']);
    const other = two.addJob(OTHER_PROJECT, ['linux', 'other']);
    const jobOf = (id: number) => two.jobs().find((j) => j.id === id);
    const regOther = await p.createRunner(message(other.id, 'other', OTHER_PROJECT), nextInstance(), 'other');
    const regHome = await p.createRunner(message(home.id, 'home'), nextInstance(), 'home');
    const regApp = await p.createRunner(message(home.id, 'app'), nextInstance(), 'app');
    const byId = (id: string) => two.runners().find((r) => r.id === Number(id));
    expect(byId(regOther.runnerId)).toMatchObject({ runnerType: 'group_type', groupId: OTHER_GROUP });
    expect(byId(regHome.runnerId)).toMatchObject({ runnerType: 'group_type', groupId: GROUP });
    expect(byId(regApp.runnerId)).toMatchObject({ runnerType: 'project_type', projectId: PROJECT });
    // Every scope's runners, each once (the project's list shows its group's runners again).
    const listed = (await p.listRunners()).map((r) => r.runnerId).sort();
    expect(listed).toEqual([regOther.runnerId, regHome.runnerId, regApp.runnerId].sort());
    const scopes = two.requests().filter((r) => r.method === 'GET' && /runners$/.test(r.path)).map((r) => r.path);
    expect(scopes.sort()).toEqual(['/groups/12/runners', '/groups/13/runners', `/projects/${PROJECT}/runners`]);
    // The other group's runner, started first, leaves the home group's older job alone.
    expect(await runFake(regOther, join(tmp, 'other.log'))).toBe(0);
    expect(jobOf(other.id)).toMatchObject({ status: 'success', runnerId: Number(regOther.runnerId) });
    expect(jobOf(home.id)?.status).toBe('pending');
    for (const r of [regOther, regHome, regApp]) await p.deleteRunner(r.runnerId);
  });

  it("refuses like GitLab where the token cannot manage the scope: 403 for a group it is no Owner of; a group it cannot see is 400 to create in (user_runners.rb, \"Missing/invalid group\") and 404 to list; one scope's refusal fails the whole list", async () => {
    const withScope = (gitlabGroupId: number) => buildFleetConfig({ ...twoConfig, prefix: PREFIX, gitlab: { url: two.url, runnerType: GitLabRunnerType.GROUP, scopeId: GROUP }, pools: [{ ...twoConfig.pools[0]!, gitlabGroupId }] });
    for (const [groupId, create, list] of [
      [FOREIGN_GROUP, 403, 403],
      [99, 400, 404],
    ] as const) {
      twoConfig = withScope(groupId);
      const p = twoProvider();
      expect((await rejection(p.createRunner(message(1, 'home'), nextInstance(), 'home'))).status).toBe(create);
      const listing = await rejection(p.listRunners());
      expect(listing.status).toBe(list);
      // The drain's failure quotes this: the scope the token cannot manage and the prop that set it.
      expect(listing.message).toMatch(new RegExp(`^GitLab list runners of group ${groupId} \\(pools\\[0\\]\\.gitlabGroupId\\) failed: HTTP ${list}`));
    }
  });
});
