import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { GetParameterCommand, SSMClient } from '@aws-sdk/client-ssm';
import { mockClient } from 'aws-sdk-client-mock';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createCiProviders, GitHubApiError, GitHubProvider } from '../../lambdas/ci';
import { buildFleetConfig, JOB_MESSAGE_SCHEMA_VERSION, ssmPaths, Provider, type CiProvider, type FleetConfig, type JobMessage } from '../../lambdas/shared/contract';
import type { Delivery } from '../../local/deliveries';
import type { LocalEvent } from '../../local/events';
import { classifyGitHubDelivery } from '../../lambdas/webhook/github-delivery';
import { verifyGitHubSignature } from '../../lambdas/webhook/verify';
import { startLoopbackGitHub, type LoopbackGitHub } from '../../local/ci/github-server';
import { runningInGroup, until } from './ci-processes';

const RUN_SH = resolve(__dirname, '../../local/runner/run.sh');
const PREFIX = 'lgh';
const ORG = 'acme';

let gh: LoopbackGitHub;
let config: FleetConfig;
let events: LocalEvent[] = [];
let tmp: string;
const ssm = mockClient(SSMClient);

function fleet(url: string): FleetConfig {
  const pool = { launchTemplateId: 'lt-0', launchTemplateVersion: '1', subnetIds: ['subnet-1'], instanceTypes: ['t3.micro'] };
  return buildFleetConfig({
    prefix: PREFIX,
    github: { appId: gh.appId, organization: ORG, apiUrl: url },
    pools: [
      { name: 'linux', provider: Provider.GITHUB, labels: ['linux', 'x64'], ...pool },
      { name: 'gpu', provider: Provider.GITHUB, labels: ['gpu'], ...pool },
    ],
  });
}

/** The provider as the Lambdas build it: createCiProviders, the App key read from SSM. */
function provider(): CiProvider {
  return createCiProviders(config, { ssm: new SSMClient({ region: 'eu-west-1' }) }).github!;
}

let instanceSerial = 0;
const nextInstance = () => `i-0${(++instanceSerial).toString(16).padStart(16, '0')}`;

function message(jobId: number, labels: string[], repository = `${ORG}/app`): JobMessage {
  const [owner, project] = repository.split('/') as [string, string];
  return {
    schemaVersion: JOB_MESSAGE_SCHEMA_VERSION,
    provider: Provider.GITHUB,
    jobId: `github:${jobId}`,
    providerJobId: String(jobId),
    pool: 'linux',
    owner,
    project,
    labels,
    labelsResolved: true,
    traceId: `t-${jobId}`,
    deliveryId: `d-${jobId}`,
    receivedAt: new Date().toISOString(),
  };
}

/** The environment templates/start-runner.sh gives the runner (`env -i` plus these). */
const BOOT_ENV = { HOME: tmpdir(), USER: 'nobody', LOGNAME: 'nobody', LANG: 'C.UTF-8', PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' };

/** The fake runner as a real process, started with the command line and environment the boot script uses. */
function runFake(jitconfig: string, log: string | undefined, bin = RUN_SH): Promise<number> {
  return new Promise((done, fail) => {
    const child = spawn(bin, ['--jitconfig', jitconfig], { env: { ...BOOT_ENV, ...(log === undefined ? {} : { LOCAL_RUNNER_LOG: log }) }, stdio: 'ignore' });
    child.on('error', fail);
    child.on('exit', (code) => done(code ?? -1));
  });
}

async function rejection(p: Promise<unknown>): Promise<GitHubApiError> {
  const e = await p.then(
    () => undefined,
    (err: unknown) => err,
  );
  expect(e).toBeInstanceOf(GitHubApiError);
  return e as GitHubApiError;
}

// A fresh GitHub per test: no job or runner of one test can be taken or listed by another.
beforeEach(async () => {
  gh = await startLoopbackGitHub({ organization: ORG, onEvent: (e) => events.push(e), jobSeconds: 0.2, runnerWaitSeconds: 1, runnerPollSeconds: 0.1 });
  config = fleet(gh.url);
  ssm.reset();
  ssm.on(GetParameterCommand, { Name: ssmPaths(PREFIX).github.appPrivateKey }).resolves({ Parameter: { Value: gh.privateKeyPem } });
});
afterEach(async () => {
  await gh.close();
  events = [];
});
beforeAll(() => {
  tmp = mkdtempSync(join(tmpdir(), 'ci-github-'));
});
afterAll(() => {
  ssm.restore();
  rmSync(tmp, { recursive: true, force: true });
});

describe('loopback GitHub through the real provider and the fake run.sh', () => {
  it('a JIT runner registers offline, takes the OLDEST queued job whose labels it has, finishes it and is removed', async () => {
    const p = provider();
    const gpuJob = gh.addJob(`${ORG}/app`, ['self-hosted', 'gpu']);
    const older = gh.addJob(`${ORG}/app`, ['self-hosted', 'linux']);
    const launchedFor = gh.addJob(`${ORG}/App`, ['self-hosted', 'linux', 'x64']);
    expect(await p.isJobQueued(message(older.id, []))).toBe(true);
    expect(await p.resolveLabels?.(message(launchedFor.id, []))).toEqual(['self-hosted', 'linux', 'x64']);

    const reg = await p.createRunner(message(launchedFor.id, launchedFor.labels), nextInstance(), 'linux');
    expect(gh.runners()).toEqual([expect.objectContaining({ id: Number(reg.runnerId), name: reg.name, labels: ['self-hosted', 'linux', 'x64'], status: 'offline', busy: false, runnerGroupId: 1 })]);
    expect(await p.listRunners()).toEqual([{ runnerId: reg.runnerId, name: reg.name, status: 'offline', busy: false }]);

    const log = join(tmp, 'assign.log');
    expect(await runFake(reg.secret, log)).toBe(0);

    // GitHub's assignment: the oldest matching job, not the one the runner was launched for.
    const jobs = new Map(gh.jobs().map((j) => [j.id, j]));
    expect(jobs.get(older.id)).toMatchObject({ status: 'completed', runnerName: reg.name });
    expect(jobs.get(launchedFor.id)).toMatchObject({ status: 'queued' });
    expect(jobs.get(launchedFor.id)?.runnerName).toBeUndefined();
    expect(jobs.get(gpuJob.id)).toMatchObject({ status: 'queued' });
    expect(await p.isJobQueued(message(older.id, []))).toBe(false);
    expect(await p.isJobQueued(message(launchedFor.id, []))).toBe(true);
    // The JIT registration is gone after its job, and the sweep sees that.
    expect(gh.runners()).toEqual([]);
    expect(await p.listRunners()).toEqual([]);
    expect(events).toEqual([expect.objectContaining({ kind: 'job-done', provider: Provider.GITHUB, ciJobId: String(older.id), runnerName: reg.name })]);
    const lines = readFileSync(log, 'utf8');
    expect(lines).toMatch(new RegExp(`running job ${older.id}`));
    expect(lines).toMatch(/done; exiting/);
    expect(lines).not.toContain(reg.secret);
    expect(lines).not.toContain(JSON.parse(Buffer.from(reg.secret, 'base64').toString()).secret);
  });

  it('two runners at once take two different jobs; a gpu runner takes only the gpu job', async () => {
    const p = provider();
    const older = gh.addJob(`${ORG}/app`, ['self-hosted', 'linux']);
    const gpu = gh.addJob(`${ORG}/app`, ['self-hosted', 'gpu']);
    const newer = gh.addJob(`${ORG}/app`, ['self-hosted', 'linux']);
    const r1 = await p.createRunner(message(newer.id, newer.labels), nextInstance(), 'linux');
    const r2 = await p.createRunner(message(gpu.id, gpu.labels), nextInstance(), 'gpu');
    const codes = await Promise.all([runFake(r1.secret, join(tmp, 'r1.log')), runFake(r2.secret, join(tmp, 'r2.log'))]);
    expect(codes).toEqual([0, 0]);
    expect(gh.jobs()).toEqual([
      { ...older, status: 'completed', conclusion: 'success', runnerName: r1.name, startedAt: expect.any(String), runnerScope: `org:${ORG}` },
      { ...gpu, status: 'completed', conclusion: 'success', runnerName: r2.name, startedAt: expect.any(String), runnerScope: `org:${ORG}` },
      { ...newer, status: 'queued' },
    ]);
    expect(events.map((e) => e.ciJobId).sort()).toEqual([String(older.id), String(gpu.id)].sort());
  });

  it('a runner without a matching job waits for the bound, goes offline and exits non-zero; its registration stays until deleted', async () => {
    const p = provider();
    const reg = await p.createRunner(message(1, ['self-hosted', 'gpu']), nextInstance(), 'gpu');
    const log = join(tmp, 'idle.log');
    expect(await runFake(reg.secret, log)).toBe(1);
    expect(readFileSync(log, 'utf8')).toMatch(/no job within 1s/);
    expect(gh.runners()).toEqual([expect.objectContaining({ name: reg.name, status: 'offline', busy: false })]);
    // Single use: the same JIT config cannot connect twice.
    expect(await runFake(reg.secret, log)).toBe(1);
    expect(readFileSync(log, 'utf8')).toMatch(/session refused \(HTTP 409\)/);
    await p.deleteRunner(reg.runnerId);
    expect(gh.runners()).toEqual([]);
    await p.deleteRunner(reg.runnerId); // already gone: 404 counts as deleted
  });

  it('a registration deleted before the runner connects: the runner exits non-zero', async () => {
    const p = provider();
    const reg = await p.createRunner(message(1, ['self-hosted', 'linux']), nextInstance(), 'linux');
    await p.deleteRunner(reg.runnerId);
    const log = join(tmp, 'deleted.log');
    expect(await runFake(reg.secret, log)).toBe(1);
    expect(readFileSync(log, 'utf8')).toMatch(/session refused \(HTTP 404\)/);
  });

  it('a busy runner cannot be deleted (422, as GitHub answers); after its job it is gone', async () => {
    const p = provider();
    const job = gh.addJob(`${ORG}/app`, ['self-hosted', 'gpu']);
    const reg = await p.createRunner(message(job.id, job.labels), nextInstance(), 'gpu');
    const { runnerId, secret } = JSON.parse(Buffer.from(reg.secret, 'base64').toString()) as { runnerId: number; secret: string };
    // Act as the runner step by step, so the busy window has no timing in it.
    const local = (path: string) => fetch(`${gh.url}/_local/github/runners/${runnerId}/${path}`, { method: 'POST', headers: { authorization: `Bearer ${secret}` } });
    expect((await local('session')).status).toBe(200);
    expect(await (await local('acquire')).json()).toEqual({ jobId: job.id, seconds: 0.2, repository: job.repository });
    expect(gh.runners()).toEqual([expect.objectContaining({ status: 'online', busy: true })]);
    expect(await p.listRunners()).toEqual([expect.objectContaining({ name: reg.name, status: 'online', busy: true })]);
    expect((await rejection(p.deleteRunner(reg.runnerId))).status).toBe(422);
    expect((await local(`jobs/${job.id}/complete`)).status).toBe(200);
    expect(gh.runners()).toEqual([]);
    expect(gh.jobs().find((j) => j.id === job.id)).toMatchObject({ status: 'completed', runnerName: reg.name });
  });

  it('announces a job its runner takes to the webhook: a workflow_job in_progress delivery, signed, that the webhook reads as this job started by this runner', async () => {
    const sent: Delivery[] = [];
    gh.setWebhook({ secret: 'hook-secret', send: async (d) => (sent.push(d), 200) });
    const job = gh.addJob(`${ORG}/app`, ['self-hosted', 'gpu']);
    const reg = await provider().createRunner(message(job.id, job.labels), nextInstance(), 'gpu');
    const { runnerId, secret } = JSON.parse(Buffer.from(reg.secret, 'base64').toString()) as { runnerId: number; secret: string };
    const local = (path: string) => fetch(`${gh.url}/_local/github/runners/${runnerId}/${path}`, { method: 'POST', headers: { authorization: `Bearer ${secret}` } });
    expect((await local('session')).status).toBe(200);
    expect(sent).toEqual([]); // online, no job yet: nothing to announce
    expect((await local('acquire')).status).toBe(200);
    await gh.hooksSettled();
    expect(sent).toHaveLength(1);
    const d = sent[0]!;
    expect(d.headers).toMatchObject({ 'x-github-event': 'workflow_job', 'x-github-delivery': d.deliveryId });
    expect(verifyGitHubSignature(Buffer.from(d.body), d.headers['x-hub-signature-256'], 'hook-secret')).toEqual({ ok: true });
    expect(verifyGitHubSignature(Buffer.from(d.body), d.headers['x-hub-signature-256'], 'another-secret').ok).toBe(false);
    const payload = JSON.parse(d.body) as { action: string; workflow_job: Record<string, unknown> };
    expect(payload.action).toBe('in_progress');
    expect(payload.workflow_job).toMatchObject({ id: job.id, status: 'in_progress', runner_id: runnerId, runner_name: reg.name, runner_group_id: 1, runner_group_name: 'Default' });
    const classified = classifyGitHubDelivery('workflow_job', payload, config.github, config.pools);
    expect(classified).toMatchObject({ kind: 'ignore', reason: 'action-in_progress', started: { providerJobId: String(job.id), runnerName: reg.name, labels: job.labels } });
    const { createdAt, startedAt } = (classified as { started: { createdAt: string; startedAt: string } }).started;
    expect(Date.parse(startedAt)).toBeGreaterThanOrEqual(Date.parse(createdAt));
    // The acquire again (the runner asking after its job) announces nothing new.
    expect((await local('acquire')).status).toBe(200);
    await gh.hooksSettled();
    expect(sent).toHaveLength(1);
  });

  it('failNext: a 5xx once on a list is retried by the provider; on generate-jitconfig it is not (GitHub may have registered it)', async () => {
    const waits: number[] = [];
    const p = new GitHubProvider({
      prefix: PREFIX,
      github: config.github!,
      pools: config.pools,
      privateKey: async () => gh.privateKeyPem,
      sleep: async (ms) => {
        waits.push(ms);
      },
    });
    gh.failNext({ method: 'GET', path: /^\/orgs\/acme\/actions\/runners$/ }, 502);
    expect(await p.listRunners()).toEqual([]);
    expect(waits).toEqual([500]);

    gh.failNext({ method: 'POST', path: /generate-jitconfig$/ }, 500);
    const e = await rejection(p.createRunner(message(1, ['self-hosted', 'linux']), nextInstance(), 'linux'));
    expect(e.status).toBe(500);
    expect(waits).toEqual([500]);
    expect(gh.runners()).toEqual([]);
    // Consumed: the next call goes through.
    const reg = await p.createRunner(message(1, ['self-hosted', 'linux']), nextInstance(), 'linux');
    expect(gh.runners().map((r) => r.name)).toEqual([reg.name]);
    await p.deleteRunner(reg.runnerId);

    gh.failNext({ method: 'GET', path: /\/actions\/runners$/ }, 503, 3);
    expect((await rejection(p.listRunners())).status).toBe(503);
    expect(waits).toEqual([500, 500, 1000]);

    // A rate limit once: waited out for the retry-after it names (plus the provider's second).
    gh.failNext({ method: 'GET', path: /\/actions\/runners$/ }, 429);
    expect(await p.listRunners()).toEqual([]);
    expect(waits).toEqual([500, 500, 1000, 2000]);
  });

  it('refuses bad credentials with 401 like GitHub: a JWT from another key, a wrong App id, no or an unknown token, a wrong runner secret', async () => {
    const otherKey = generateKeyPairSync('rsa', { modulusLength: 2048, privateKeyEncoding: { type: 'pkcs1', format: 'pem' }, publicKeyEncoding: { type: 'spki', format: 'pem' } }).privateKey;
    const options = { prefix: PREFIX, pools: config.pools, sleep: async () => undefined };
    const wrongKey = new GitHubProvider({ ...options, github: config.github!, privateKey: async () => otherKey });
    expect((await rejection(wrongKey.listRunners())).status).toBe(401);
    const wrongApp = new GitHubProvider({ ...options, github: { ...config.github!, appId: '1' }, privateKey: async () => gh.privateKeyPem });
    expect((await rejection(wrongApp.listRunners())).status).toBe(401);

    const runnersUrl = `${gh.url}/orgs/${ORG}/actions/runners`;
    expect((await fetch(runnersUrl)).status).toBe(401);
    const unknown = await fetch(runnersUrl, { headers: { authorization: `token ghs_${randomBytes(18).toString('hex')}` } });
    expect(unknown.status).toBe(401);
    expect(await unknown.json()).toMatchObject({ message: 'Bad credentials' });

    const reg = await provider().createRunner(message(1, ['self-hosted', 'linux']), nextInstance(), 'linux');
    const { runnerId } = JSON.parse(Buffer.from(reg.secret, 'base64').toString()) as { runnerId: number };
    const forged = Buffer.from(JSON.stringify({ url: gh.url, runnerId, name: reg.name, secret: 'guessed' })).toString('base64');
    const log = join(tmp, 'forged.log');
    expect(await runFake(forged, log)).toBe(1);
    expect(readFileSync(log, 'utf8')).toMatch(/session refused \(HTTP 401\)/);
    expect(gh.runners().find((r) => r.name === reg.name)?.status).toBe('offline');
    await provider().deleteRunner(reg.runnerId);
  });

  it('repository runners: the repository routes, and the runner takes only jobs of its repository', async () => {
    const repoConfig = { ...config, github: { ...config.github!, organization: undefined, repositories: [`${ORG}/svc`] } };
    const p = createCiProviders(repoConfig, { ssm: new SSMClient({ region: 'eu-west-1' }) }).github!;
    const elsewhere = gh.addJob(`${ORG}/app`, ['self-hosted', 'gpu']);
    const own = gh.addJob(`${ORG}/svc`, ['self-hosted', 'gpu']);
    const reg = await p.createRunner({ ...message(own.id, own.labels, `${ORG}/svc`), pool: 'gpu' }, nextInstance(), 'gpu');
    expect(reg.runnerId).toMatch(new RegExp(`^${ORG}/svc/\\d+$`));
    expect(await p.listRunners()).toEqual([expect.objectContaining({ runnerId: reg.runnerId, status: 'offline' })]);
    expect(await provider().listRunners()).toEqual([]); // not an organisation runner
    expect(await runFake(reg.secret, join(tmp, 'repo.log'))).toBe(0);
    expect(gh.jobs().find((j) => j.id === own.id)).toMatchObject({ status: 'completed', runnerName: reg.name });
    expect(gh.jobs().find((j) => j.id === elsewhere.id)?.status).toBe('queued');
    expect(await p.listRunners()).toEqual([]);
  });

  it('reuse: a scoped runner of an organisation fleet is a repository runner (repository route, group 1) that never takes another repository\'s job of the same labels', async () => {
    const p = provider();
    // Older, same labels, another repository: GitHub hands out by label, the oldest first.
    const foreign = gh.addJob(`${ORG}/other`, ['self-hosted', 'linux', 'x64']);
    const own = gh.addJob(`${ORG}/app`, ['self-hosted', 'linux', 'x64']);
    const reg = await p.createRunner(message(own.id, own.labels), nextInstance(), 'linux', { scoped: true });
    expect(reg.runnerId).toMatch(new RegExp(`^${ORG}/app/\\d+$`));
    expect(gh.requests().filter((r) => r.path.endsWith('/generate-jitconfig')).map((r) => r.path)).toEqual([`/repos/${ORG}/app/actions/runners/generate-jitconfig`]);
    expect(gh.runners()).toEqual([expect.objectContaining({ name: reg.name, runnerGroupId: 1, labels: ['self-hosted', 'linux', 'x64'] })]);
    expect(p.runnerServes?.(reg.runnerId, message(foreign.id, foreign.labels, `${ORG}/other`))).toBe(false);
    // Listed per repository only: the sweep names the repositories.
    expect(await p.listRunners()).toEqual([]);
    expect(await p.listRunners({ repositories: [`${ORG}/app`, `${ORG}/app`] })).toEqual([expect.objectContaining({ runnerId: reg.runnerId })]);
    expect(await runFake(reg.secret, join(tmp, 'scoped.log'))).toBe(0);
    expect(gh.jobs().find((j) => j.id === own.id)).toMatchObject({ status: 'completed', runnerName: reg.name });
    expect(gh.jobs().find((j) => j.id === foreign.id)?.status).toBe('queued');
    // An unscoped (organisation) runner of the same labels does take the foreign job: by label only.
    const orgReg = await p.createRunner(message(foreign.id, foreign.labels, `${ORG}/other`), nextInstance(), 'linux');
    expect(orgReg.runnerId).toMatch(/^\d+$/);
    expect(await runFake(orgReg.secret, join(tmp, 'org.log'))).toBe(0);
    expect(gh.jobs().find((j) => j.id === foreign.id)).toMatchObject({ status: 'completed', runnerName: orgReg.name });
  });

  it('reuse: a scoped runner\'s id is spelled in lower case, as its affinity; it is listed by that name and deleted at its repository', async () => {
    const p = provider();
    const own = gh.addJob(`${ORG}/app`, ['self-hosted', 'linux']);
    const reg = await p.createRunner(message(own.id, own.labels, `${ORG.toUpperCase()}/App`), nextInstance(), 'linux', { scoped: true });
    expect(reg.runnerId).toMatch(new RegExp(`^${ORG}/app/\\d+$`));
    expect(await p.listRunners({ repositories: [`${ORG.toUpperCase()}/APP`] })).toEqual([expect.objectContaining({ runnerId: reg.runnerId })]);
    await p.deleteRunner(reg.runnerId);
    expect(gh.runners()).toEqual([]);
    expect(gh.requests().some((r) => r.method === 'DELETE' && r.path === `/repos/${reg.runnerId.replace(/\/(\d+)$/, '/actions/runners/$1')}`)).toBe(true);
  });

  it('logs to the file named in local-runner-log beside the binary when env -i dropped LOCAL_RUNNER_LOG', async () => {
    const dir = join(tmp, 'runner-dir');
    mkdirSync(dir, { recursive: true });
    copyFileSync(RUN_SH, join(dir, 'run.sh'));
    const log = join(tmp, 'beside.log');
    writeFileSync(join(dir, 'local-runner-log'), `${log}\n`);
    const reg = await provider().createRunner(message(1, ['self-hosted', 'gpu']), nextInstance(), 'gpu');
    await provider().deleteRunner(reg.runnerId);
    expect(await runFake(reg.secret, undefined, join(dir, 'run.sh'))).toBe(1);
    expect(readFileSync(log, 'utf8')).toMatch(/session refused \(HTTP 404\)/);
  });

  it('run.sh is shellcheck-clean and refuses any other command line than the boot script\'s', async () => {
    expect(() => execFileSync('shellcheck', [RUN_SH])).not.toThrow();
    const log = join(tmp, 'usage.log');
    const spawnWith = (args: string[]) =>
      new Promise<number>((done) => spawn(RUN_SH, args, { env: { ...BOOT_ENV, LOCAL_RUNNER_LOG: log }, stdio: 'ignore' }).on('exit', (code) => done(code ?? -1)));
    expect(await spawnWith([])).toBe(1);
    expect(await spawnWith(['--jitconfig'])).toBe(1);
    expect(await spawnWith(['--jitconfig', 'not base64!'])).toBe(1);
    expect(await spawnWith(['--jitconfig', Buffer.from('{"url":"x"}').toString('base64')])).toBe(1);
    expect(readFileSync(log, 'utf8')).toMatch(/usage: run\.sh --jitconfig[\s\S]*lacks url, runnerId or secret/);
  });

  it('pages the runner list with a link header; the provider reads every page', async () => {
    const p = provider();
    const regs = [];
    for (let i = 0; i < 3; i++) regs.push(await p.createRunner(message(1, ['self-hosted', 'linux']), nextInstance(), 'linux'));
    // The installation token the provider itself sends, for a raw paged request.
    let token = '';
    const spy: typeof fetch = async (input, init) => {
      token = new Headers(init?.headers).get('authorization') ?? token;
      return fetch(input, init);
    };
    await new GitHubProvider({ prefix: PREFIX, pools: config.pools, github: config.github!, privateKey: async () => gh.privateKeyPem, fetch: spy }).listRunners();
    expect(token).toMatch(/^token ghs_/);
    const res = await fetch(`${gh.url}/orgs/${ORG}/actions/runners?per_page=2&page=1`, { headers: { authorization: token } });
    const body = (await res.json()) as { total_count: number; runners: unknown[] };
    expect(body.total_count).toBe(3);
    expect(body.runners).toHaveLength(2);
    // GitHub's link header names only where there is to go: next and last from the first page,
    // prev and first from the last.
    const at = (page: number, rel: string) => `<${gh.url}/orgs/${ORG}/actions/runners?per_page=2&page=${page}>; rel="${rel}"`;
    expect(res.headers.get('link')).toBe(`${at(2, 'next')}, ${at(2, 'last')}`);
    const last = await fetch(`${gh.url}/orgs/${ORG}/actions/runners?per_page=2&page=2`, { headers: { authorization: token } });
    expect(((await last.json()) as { runners: unknown[] }).runners).toHaveLength(1);
    expect(last.headers.get('link')).toBe(`${at(1, 'prev')}, ${at(1, 'first')}`);
    // All on one page: no link header at all.
    expect((await fetch(`${gh.url}/orgs/${ORG}/actions/runners`, { headers: { authorization: token } })).headers.get('link')).toBeNull();
    expect((await p.listRunners()).map((r) => r.name).sort()).toEqual(regs.map((r) => r.name).sort());
    for (const r of regs) await p.deleteRunner(r.runnerId);
  });
});

describe("GitHub's documented query bounds (local/ci/github-bounds.ts)", () => {
  it('per_page above 100 is served as 100, not refused (as GitHub documents); a value outside an enum is a 422', async () => {
    const repositories = Array.from({ length: 101 }, (_, i) => `${ORG}/repo-${i}`);
    const big = await startLoopbackGitHub({ organization: ORG, repositories });
    try {
      const p = new GitHubProvider({ prefix: PREFIX, pools: config.pools, github: { ...config.github!, apiUrl: big.url }, privateKey: async () => big.privateKeyPem, sleep: async () => undefined });
      const repos = await p.installationRequest('list repositories', 'GET /installation/repositories', { per_page: 101 });
      expect((repos.data as { repositories: unknown[] }).repositories).toHaveLength(100);
      for (let i = 0; i < 101; i++) big.recordDelivery(big.addJob(`${ORG}/app`, ['self-hosted', 'linux']).id, 500);
      const deliveries = await p.appRequest('list deliveries', 'GET /app/hook/deliveries', { per_page: 101 }, true);
      expect(deliveries.data).toHaveLength(100);
      expect(deliveries.headers.link).toContain('rel="next"');
      const refused = [
        () => p.appRequest('list deliveries', 'GET /app/hook/deliveries', { status: 'failed' }, true),
        () => p.installationRequest('list runs', 'GET /repos/{owner}/{repo}/actions/runs', { owner: ORG, repo: 'app', status: 'running' }, `${ORG}/app`),
        () => p.installationRequest('list run jobs', 'GET /repos/{owner}/{repo}/actions/runs/{run_id}/jobs', { owner: ORG, repo: 'app', run_id: 1, filter: 'newest' }, `${ORG}/app`),
      ];
      for (const r of refused) expect((await rejection(r())).status).toBe(422);
    } finally {
      await big.close();
    }
  });
});

describe('a fake runner killed mid-job', () => {
  it('leaves no process behind on SIGTERM; GitHub then counts the runner lost: its job fails, it goes offline, not busy, and can be deleted', async () => {
    let clock = Date.now();
    const lost = await startLoopbackGitHub({ organization: ORG, onEvent: (e) => events.push(e), jobSeconds: 60, runnerLostSeconds: 5, runnerPollSeconds: 0.1, now: () => clock });
    let child: ChildProcess | undefined;
    try {
      const p = new GitHubProvider({ prefix: PREFIX, pools: config.pools, github: { ...config.github!, apiUrl: lost.url }, privateKey: async () => lost.privateKeyPem, sleep: async () => undefined });
      const job = lost.addJob(`${ORG}/app`, ['self-hosted', 'linux']);
      const reg = await p.createRunner(message(job.id, job.labels), nextInstance(), 'linux');
      const log = join(tmp, 'killed.log');
      // Its own process group, so that whatever the runner left running can be seen.
      child = spawn(RUN_SH, ['--jitconfig', reg.secret], { env: { ...BOOT_ENV, LOCAL_RUNNER_LOG: log }, stdio: 'ignore', detached: true });
      const spawned = child;
      const exited = new Promise<unknown>((done) => spawned.on('exit', done));
      // At work: past every request of the job's start, so the signal meets the runner itself.
      await until(() => existsSync(log) && readFileSync(log, 'utf8').includes(`running job ${job.id} for 60s`));
      expect(lost.jobs()[0]?.status).toBe('in_progress');
      // Still within its job: busy, so GitHub refuses the deletion.
      expect((await rejection(p.deleteRunner(reg.runnerId))).status).toBe(422);

      process.kill(child.pid!, 'SIGTERM');
      await exited;
      expect(runningInGroup(child.pid!)).toEqual([]);

      // Not yet past the job's time plus the lost bound: still busy.
      clock += 60_000;
      expect(lost.runners()).toEqual([expect.objectContaining({ status: 'online', busy: true })]);
      clock += 5_001;
      expect(lost.runners()).toEqual([expect.objectContaining({ status: 'offline', busy: false })]);
      expect(lost.jobs()).toEqual([expect.objectContaining({ id: job.id, status: 'completed', conclusion: 'failure' })]);
      expect(await p.listRunners()).toEqual([{ runnerId: reg.runnerId, name: reg.name, status: 'offline', busy: false }]);
      await p.deleteRunner(reg.runnerId);
      expect(lost.runners()).toEqual([]);
      expect(events).toEqual([]); // the job was not done
    } finally {
      // A failed expectation must not leave the runner running either.
      if (child?.exitCode === null && child.signalCode === null) process.kill(-child.pid!, 'SIGKILL');
      await lost.close();
    }
  });

  it('a connected runner that stops asking for jobs goes offline after the lost bound', async () => {
    let clock = Date.now();
    const lost = await startLoopbackGitHub({ organization: ORG, runnerLostSeconds: 5, now: () => clock });
    try {
      const p = new GitHubProvider({ prefix: PREFIX, pools: config.pools, github: { ...config.github!, apiUrl: lost.url }, privateKey: async () => lost.privateKeyPem, sleep: async () => undefined });
      const reg = await p.createRunner(message(1, ['self-hosted', 'linux']), nextInstance(), 'linux');
      const { runnerId, secret } = JSON.parse(Buffer.from(reg.secret, 'base64').toString()) as { runnerId: number; secret: string };
      const res = await fetch(`${lost.url}/_local/github/runners/${runnerId}/session`, { method: 'POST', headers: { authorization: `Bearer ${secret}` } });
      expect(res.status).toBe(200);
      clock += 5_000;
      expect(lost.runners()).toEqual([expect.objectContaining({ status: 'online' })]);
      clock += 1;
      expect(lost.runners()).toEqual([expect.objectContaining({ status: 'offline', busy: false })]);
      await p.deleteRunner(reg.runnerId);
    } finally {
      await lost.close();
    }
  });
});

describe('stray runners: the retry cases of issue 11 as loopback modes', () => {
  /** A GitHub whose runners' own jobs the test names (runner name → job id), in the given modes. */
  async function strayGitHub(own: Map<string, number>, modes: { takesAnotherJob?: (name: string) => boolean; diesBeforeJob?: (name: string) => boolean }): Promise<GitHubProvider> {
    const stray = await startLoopbackGitHub({ organization: ORG, jobSeconds: 0.2, runnerWaitSeconds: 1, runnerPollSeconds: 0.1, strays: { ownJob: (name) => own.get(name), ...modes } });
    await gh.close();
    gh = stray;
    return new GitHubProvider({ prefix: PREFIX, pools: config.pools, github: { ...config.github!, apiUrl: gh.url }, privateKey: async () => gh.privateKeyPem, sleep: async () => undefined });
  }

  it('takesAnotherJob: the runner takes another queued job of its labels, not the one it was made for; with none other waiting, its own', async () => {
    const own = new Map<string, number>();
    const p = await strayGitHub(own, { takesAnotherJob: () => true });
    // Its own job is the oldest: GitHub's own choice would be it.
    const mine = gh.addJob(`${ORG}/app`, ['self-hosted', 'linux']);
    const other = gh.addJob(`${ORG}/app`, ['self-hosted', 'linux']);
    const reg = await p.createRunner(message(mine.id, mine.labels), nextInstance(), 'linux');
    own.set(reg.name, mine.id);
    expect(await runFake(reg.secret, join(tmp, 'stray.log'))).toBe(0);
    const jobs = new Map(gh.jobs().map((j) => [j.id, j]));
    expect(jobs.get(other.id)).toMatchObject({ status: 'completed', conclusion: 'success', runnerName: reg.name });
    expect(jobs.get(mine.id)).toMatchObject({ status: 'queued' });
    expect(await p.isJobQueued(message(mine.id, []))).toBe(true);

    // A second runner made for the same job finds no other waiting: it takes its own.
    const second = await p.createRunner(message(mine.id, mine.labels), nextInstance(), 'linux');
    own.set(second.name, mine.id);
    expect(await runFake(second.secret, join(tmp, 'stray-2.log'))).toBe(0);
    expect(gh.jobs().find((j) => j.id === mine.id)).toMatchObject({ status: 'completed', runnerName: second.name });
  });

  it('diesBeforeJob: the runner comes online, takes nothing and is offline; its job stays queued and its registration stays', async () => {
    const dying = new Set<string>();
    const own = new Map<string, number>();
    const p = await strayGitHub(own, { diesBeforeJob: (name) => dying.has(name) });
    const job = gh.addJob(`${ORG}/app`, ['self-hosted', 'linux']);
    const reg = await p.createRunner(message(job.id, job.labels), nextInstance(), 'linux');
    dying.add(reg.name);
    const log = join(tmp, 'dies.log');
    expect(await runFake(reg.secret, log)).toBe(1);
    expect(readFileSync(log, 'utf8')).toMatch(/online; waiting/);
    expect(readFileSync(log, 'utf8')).not.toMatch(/running job/);
    expect(gh.jobs()).toEqual([expect.objectContaining({ id: job.id, status: 'queued' })]);
    expect(gh.jobs()[0]?.runnerName).toBeUndefined();
    expect(await p.listRunners()).toEqual([{ runnerId: reg.runnerId, name: reg.name, status: 'offline', busy: false }]);

    // The job was there to take: a runner that does not die takes it.
    const next = await p.createRunner(message(job.id, job.labels), nextInstance(), 'linux');
    expect(await runFake(next.secret, join(tmp, 'lives.log'))).toBe(0);
    expect(gh.jobs()).toEqual([expect.objectContaining({ id: job.id, status: 'completed', runnerName: next.name })]);
    await p.deleteRunner(reg.runnerId);
  });
});
