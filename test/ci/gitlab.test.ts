import { SSMClient, GetParameterCommand } from '@aws-sdk/client-ssm';
import { mockClient } from 'aws-sdk-client-mock';
import { beforeEach, describe, expect, it } from 'vitest';
import { createCiProviders, GitHubApps } from '../../lambdas/ci';
import { GitLabApiError, GitLabProvider, type GitLabProviderOptions } from '../../lambdas/ci/gitlab';
import { buildFleetConfig, JOB_MESSAGE_SCHEMA_VERSION, JobLookupError, METRIC_NAMES, runnerName, ssmPaths, GitLabRunnerType, Provider, type JobMessage } from '../../lambdas/shared/contract';
import { createLogger } from '../../lambdas/shared/log';
import type { Answer, SeenRequest } from '../support/loopback';
import { checkGitLabQuery } from '../../local/ci/gitlab-bounds';
import { providerLoopback } from './provider-loopback';
import { plantSecret, secretForms } from '../webhook/support';

const PREFIX = 'glp-test';
const T0 = Date.parse('2026-11-29T19:00:00Z');
const INSTANCE = 'i-0123456789abcdef0';
const apiToken = `glpat-${plantSecret('gl-api')}`;

let runners: { id: number; description: string; status: string; runner_type: string; paused?: boolean }[] = [];
const runnerTokens: string[] = [];

/** GitLab's documented REST shapes (api/users.md#create-a-runner, api/runners.md, api/jobs.md), under a path prefix like a self-managed install. */
function gitlab(req: SeenRequest): Answer | 'hang' {
  if (req.headers['private-token'] !== apiToken) return { status: 401, body: { message: '401 Unauthorized' } };
  const url = new URL(req.path, 'http://x');
  const path = url.pathname.replace(/^\/gitlab\/api\/v4/, '');
  // GitLab's documented query bounds, as the sandbox's loopback GitLab checks them.
  const window = checkGitLabQuery(req.method, path, url.searchParams);
  if ('refusal' in window) return window.refusal;
  if (path === '/user/runners' && req.method === 'POST') {
    const body = JSON.parse(req.body) as Record<string, unknown>;
    if (!['instance_type', 'group_type', 'project_type'].includes(body.runner_type as string)) return { status: 400, body: { error: 'runner_type does not have a valid value' } };
    if (body.runner_type === 'group_type' && !body.group_id) return { status: 400, body: { message: '400 Bad request - group_id is missing' } };
    const token = `glrt-${plantSecret('runner').replace(/-/g, '')}`;
    runnerTokens.push(token);
    const id = 9307 + runners.length;
    runners.push({ id, description: body.description as string, status: 'never_contacted', runner_type: body.runner_type as string });
    return { status: 201, body: { id, token, token_expires_at: null } };
  }
  const del = /^\/runners\/(\d+)$/.exec(path);
  if (del && req.method === 'DELETE') {
    const i = runners.findIndex((r) => r.id === Number(del[1]));
    if (i < 0) return { status: 404, body: { message: '404 Runner Not Found' } };
    runners.splice(i, 1);
    return { status: 204 };
  }
  if (/^\/(runners\/all|groups\/\d+\/runners|projects\/\d+\/runners)$/.test(path) && req.method === 'GET') {
    const { perPage: per, page } = window;
    const slice = runners.slice((page - 1) * per, page * per);
    const next = page * per < runners.length ? String(page + 1) : '';
    return { status: 200, headers: { 'x-next-page': next, 'x-page': String(page) }, body: slice.map((r) => ({ ...r, name: null, active: true, paused: false, is_shared: r.runner_type === 'instance_type', online: r.status === 'online', ip_address: null })) };
  }
  const runnerJobs = /^\/runners\/(\d+)\/jobs$/.exec(path);
  if (runnerJobs && req.method === 'GET') {
    // api/runners.md#list-jobs-processed-by-a-runner: runner 9401 runs job 1978; 9402 ran 1979; 9403 answers garbage;
    // 9405's job 1985 is canceling (its after_script runs); 9406 is on a GitLab before 17.0, which knows no canceling.
    const status = url.searchParams.get('status');
    if (status !== 'running' && (status !== 'canceling' || runnerJobs[1] === '9406')) return { status: 400, body: { error: 'status does not have a valid value' } };
    const jobs: Record<string, { id: number; status: string }[] | object> = { '9401': [{ id: 1978, status: 'running' }], '9402': [], '9403': { jobs: [] }, '9405': [{ id: 1985, status: 'canceling' }], '9406': [] };
    const all = jobs[runnerJobs[1]!];
    const listed = Array.isArray(all) ? all.filter((j) => j.status === status).map((j) => ({ ...j, stage: 'test', name: 'test', pipeline: { id: 5, status: j.status } })) : all;
    return listed === undefined ? { status: 404, body: { message: '404 Runner Not Found' } } : { status: 200, body: listed };
  }
  const one = /^\/runners\/(\d+)$/.exec(path);
  const known = one ? runners.find((r) => r.id === Number(one[1])) : undefined;
  // api/runners.md, "Update runner's details" (`paused`) and "Get runner's details".
  if (one && (req.method === 'PUT' || req.method === 'GET')) {
    if (!known) return { status: 404, body: { message: '404 Runner Not Found' } };
    if (req.method === 'PUT') known.paused = (JSON.parse(req.body) as { paused: boolean }).paused;
    return { status: 200, body: { id: known.id, description: known.description, paused: known.paused ?? false, active: !(known.paused ?? false), status: known.status } };
  }
  const job = /^\/projects\/(\d+)\/jobs\/(\d+)$/.exec(path);
  if (job && req.method === 'GET') {
    const status = { '1977': 'pending', '1978': 'running', '1979': 'success', '1980': 'created', '1981': 'preparing', '1982': 'scheduled', '1983': 'canceled', '1984': 'waiting_for_resource' }[job[2]!];
    return status && job[1] === '380' ? { status: 200, body: { id: Number(job[2]), status, stage: 'test', name: 'test', tag_list: ['docker', 'linux'] } } : { status: 404, body: { message: '404 Not found' } };
  }
  return { status: 404, body: { error: '404 Not Found' } };
}

function provider(connection: Partial<GitLabProviderOptions['gitlab']> = {}, extra: Partial<GitLabProviderOptions> = {}) {
  const config = buildFleetConfig({
    prefix: PREFIX,
    gitlab: { url: `${h.server.url}/gitlab`, runnerType: GitLabRunnerType.GROUP, scopeId: 12 },
    pools: [{ name: 'docker', provider: Provider.GITLAB, labels: ['docker', 'linux'], runUntagged: true, launchTemplateId: 'lt', launchTemplateVersion: '1', subnetIds: ['s'], instanceTypes: ['t3.micro'] }],
  });
  return new GitLabProvider({
    ...h.providerBase(config),
    gitlab: { ...config.gitlab!, ...connection },
    token: async () => apiToken,
    now: () => T0,
    ...extra,
  });
}

const job = (over: Partial<JobMessage> = {}): JobMessage => ({
  schemaVersion: JOB_MESSAGE_SCHEMA_VERSION,
  provider: Provider.GITLAB,
  jobId: 'gitlab:1977',
  providerJobId: '1977',
  pool: 'docker',
  owner: 'gitlab-org',
  project: 'gitlab-test',
  projectId: 380,
  labels: [],
  labelsResolved: false,
  traceId: 't-1',
  deliveryId: 'd-1',
  receivedAt: new Date(T0).toISOString(),
  ...over,
});

const h = providerLoopback(gitlab, () => {
  runners = [];
});
const { faults, waits, errors } = h;
const failure = (p: Promise<unknown>) => h.failure(p, GitLabApiError);

describe('GitLabProvider against a loopback self-managed GitLab', () => {
  it('creates a group runner with the pool tags, run_untagged and the activation name, returning URL and glrt- token', async () => {
    const reg = await provider().createRunner(job(), INSTANCE, 'docker');
    expect(reg).toEqual({ runnerId: '9307', name: runnerName(PREFIX, INSTANCE, new Date(T0)), secret: runnerTokens.at(-1), url: `${h.server.url}/gitlab` });
    expect(reg.secret).toMatch(/^glrt-/);
    const post = h.server.requests[0]!;
    expect([post.method, post.path]).toEqual(['POST', '/gitlab/api/v4/user/runners']);
    expect(JSON.parse(post.body)).toEqual({ runner_type: 'group_type', group_id: 12, description: reg.name, tag_list: ['docker', 'linux'], run_untagged: true });
  });

  it.each([
    [GitLabRunnerType.INSTANCE, undefined, {}, '/gitlab/api/v4/runners/all?type=instance_type&per_page=100&page=1'],
    [GitLabRunnerType.PROJECT, 34, { project_id: 34, locked: true }, '/gitlab/api/v4/projects/34/runners?type=project_type&per_page=100&page=1'],
    [GitLabRunnerType.GROUP, 12, { group_id: 12 }, '/gitlab/api/v4/groups/12/runners?type=group_type&per_page=100&page=1'],
  ] as const)('%s runners: creation scope and the list endpoint', async (runnerType, scopeId, scope, listPath) => {
    const p = provider({ runnerType, ...(scopeId === undefined ? { scopeId: undefined } : { scopeId }) });
    await p.createRunner(job(), INSTANCE, 'docker');
    expect(JSON.parse(h.server.requests[0]!.body)).toMatchObject({ runner_type: runnerType, ...scope });
    await p.listRunners();
    expect(h.server.requests[1]!.path).toBe(listPath);
  });

  it('lists only the fleet runners, following x-next-page', async () => {
    for (let i = 0; i < 150; i++) runners.push({ id: i + 1, description: i % 3 ? `${PREFIX}-i-0000000${i}-x` : `shared-${i}`, status: i % 2 ? 'online' : 'offline', runner_type: 'group_type' });
    // Another fleet whose prefix extends ours: not ours.
    runners.push({ id: 500, description: `${PREFIX}-b-i-00000001-x`, status: 'online', runner_type: 'group_type' });
    const list = await provider().listRunners();
    expect(list).toHaveLength(100);
    expect(list[0]).toEqual({ runnerId: '2', name: `${PREFIX}-i-00000001-x`, status: 'online' });
    expect(h.server.requests.map((r) => new URL(r.path, 'http://x').searchParams.get('page'))).toEqual(['1', '2']);
  });

  it('deletes a runner, and a runner already gone is fine', async () => {
    const p = provider();
    const reg = await p.createRunner(job(), INSTANCE, 'docker');
    await p.deleteRunner(reg.runnerId);
    await p.deleteRunner(reg.runnerId);
    expect(runners).toHaveLength(0);
    await expect(p.deleteRunner('../9307')).rejects.toThrow(/not a GitLab runner id/);
  });

  it("asks GitLab for the runner's running jobs: busy, idle, and anything else throws (unknown is not idle)", async () => {
    const p = provider();
    expect(await p.runnerBusy('9401')).toBe(true);
    expect(await p.runnerBusy('9402')).toBe(false);
    // running first; only when none, canceling (a cancelled job whose after_script still runs).
    expect(h.server.requests.map((r) => r.path)).toEqual([
      '/gitlab/api/v4/runners/9401/jobs?status=running&per_page=1',
      '/gitlab/api/v4/runners/9402/jobs?status=running&per_page=1',
      '/gitlab/api/v4/runners/9402/jobs?status=canceling&per_page=1',
    ]);
    expect(await p.runnerBusy('9405')).toBe(true);
    // A GitLab before 17.0 answers the canceling query 400: it has no such state, so none.
    expect(await p.runnerBusy('9406')).toBe(false);
    expect(await failure(p.runnerBusy('9404'))).toMatchObject({ status: 404 });
    expect(await failure(p.runnerBusy('9403'))).toMatchObject({ message: expect.stringContaining('answer is not a list') });
    await expect(p.runnerBusy('../9401')).rejects.toThrow(/not a GitLab runner id/);
  });

  it('pauses and unpauses a runner (PUT paused), reads it back, and a runner gone reads undefined', async () => {
    const p = provider();
    const reg = await p.createRunner(job(), INSTANCE, 'docker');
    await p.setRunnerPaused(reg.runnerId, true);
    expect(await p.runnerPaused(reg.runnerId)).toBe(true);
    await p.setRunnerPaused(reg.runnerId, false);
    expect(await p.runnerPaused(reg.runnerId)).toBe(false);
    expect(h.server.requests.filter((r) => r.method === 'PUT').map((r) => JSON.parse(r.body) as unknown)).toEqual([{ paused: true }, { paused: false }]);
    await p.deleteRunner(reg.runnerId);
    expect(await p.runnerPaused(reg.runnerId)).toBeUndefined();
    expect(await failure(p.setRunnerPaused(reg.runnerId, false))).toMatchObject({ status: 404 });
  });

  it('tells whether a job still waits, and resolves its tags', async () => {
    const p = provider();
    expect(await p.isJobQueued(job())).toBe(true);
    expect(await p.isJobQueued(job({ providerJobId: '1980', jobId: 'gitlab:1980' }))).toBe(true);
    expect(await p.isJobQueued(job({ providerJobId: '1978', jobId: 'gitlab:1978' }))).toBe(false);
    expect(await p.isJobQueued(job({ providerJobId: '1979', jobId: 'gitlab:1979' }))).toBe(false);
    expect(await p.isJobQueued(job({ providerJobId: '1983', jobId: 'gitlab:1983' }))).toBe(false);
    // No runner yet: preparing (prerequisites), scheduled (a delayed job), waiting for a resource group.
    for (const id of ['1981', '1982', '1984']) expect(await p.isJobQueued(job({ providerJobId: id, jobId: `gitlab:${id}` })), id).toBe(true);
    // 404 is "deleted" or "the token cannot see the project": a typed error, never a silent false.
    for (const lookup of [p.isJobQueued(job({ providerJobId: '4040', jobId: 'gitlab:4040' })), p.resolveLabels(job({ providerJobId: '4040', jobId: 'gitlab:4040' }))]) {
      const e = await lookup.catch((err: unknown) => err);
      expect(e).toBeInstanceOf(JobLookupError);
      expect(e).toMatchObject({ provider: Provider.GITLAB, jobId: 'gitlab:4040', reason: 'not-found' });
    }
    expect(await p.resolveLabels(job())).toEqual(['docker', 'linux']);
    await expect(p.resolveLabels(job({ projectId: undefined }))).rejects.toThrow(/project id/);
  });

  it('waits out 429 Retry-After and RateLimit-Reset within the bound, fails beyond it', async () => {
    const p = provider();
    faults.push(() => ({ status: 429, headers: { 'retry-after': '1' }, body: { message: 'Retry later' } }));
    faults.push(() => ({ status: 429, headers: { 'ratelimit-reset': String(T0 / 1000 + 3) }, body: { message: 'Retry later' } }));
    expect(await p.resolveLabels(job())).toEqual(['docker', 'linux']);
    expect(waits).toEqual([2000, 4000]);
    faults.push(() => ({ status: 429, headers: { 'retry-after': '3600' }, body: { message: 'Retry later' } }));
    expect((await failure(p.listRunners())).message).toMatch(/beyond the 10 s bound/);
  });

  it('retries 5xx for GET and DELETE, never for the runner creation', async () => {
    const p = provider();
    faults.push(() => ({ status: 503, body: { message: '503 Service Unavailable' } }));
    await p.listRunners();
    expect(waits).toEqual([500]);
    faults.push(() => ({ status: 500, body: { message: '500 Internal Server Error' } }));
    expect((await failure(p.createRunner(job(), INSTANCE, 'docker'))).status).toBe(500);
    expect(h.server.requests.filter((r) => r.method === 'POST')).toHaveLength(1);
  });

  it.each([
    [401, { message: '401 Unauthorized' }],
    [403, { message: '403 Forbidden - insufficient_scope' }],
    [422, { message: { tag_list: ['is invalid'] } }],
  ])('reports %i from runner creation', async (status, body) => {
    faults.push(() => ({ status, body }));
    const e = await failure(provider().createRunner(job(), INSTANCE, 'docker'));
    expect(e.status).toBe(status);
  });

  it('tells its owner to read the token again after a 401, and reports a runner list cut at the page cap', async () => {
    let invalidated = 0;
    const seen: unknown[] = [];
    const p = provider({}, { invalidateToken: () => invalidated++, maxPages: 1, onListTruncated: (info) => seen.push(info) });
    faults.push(() => ({ status: 401, body: { message: '401 Unauthorized' } }));
    await failure(p.listRunners());
    expect(invalidated).toBe(1);
    for (let i = 0; i < 150; i++) runners.push({ id: i + 1, description: `${PREFIX}-i-0000000${i}-x`, status: 'online', runner_type: 'group_type' });
    await p.listRunners();
    expect(seen).toEqual([{ scope: 'group_type:12', pages: 1 }]);
    await provider({}, { maxPages: 2, onListTruncated: (info) => seen.push(info) }).listRunners();
    expect(seen).toHaveLength(1);
    expect(invalidated).toBe(1);
  });

  it('refuses an unknown pool before calling GitLab', async () => {
    await expect(provider().createRunner(job(), INSTANCE, 'nope')).rejects.toThrow(/not a GitLab pool/);
    expect(h.server.requests).toHaveLength(0);
  });

  it('bounds every call in time: a GitLab that never answers, and a caller signal', async () => {
    faults.push(() => 'hang');
    expect((await failure(provider({}, { timeoutMs: 300 }).createRunner(job(), INSTANCE, 'docker'))).message).toMatch(/timed out/);
    faults.push(() => 'hang');
    const e = await failure(provider().resolveLabels(job(), AbortSignal.timeout(200)));
    expect(e.status).toBe(0);
  });

  it('never puts the API token or a runner token in an error', () => {
    expect(errors.length).toBeGreaterThan(5);
    const all = [...errors, ...h.consoleLines].join('\n');
    for (const secret of [apiToken, ...runnerTokens]) for (const form of secretForms(secret)) expect(all.includes(form)).toBe(false);
  });
});

describe('createCiProviders', () => {
  const ssm = mockClient(SSMClient);
  beforeEach(() => ssm.reset());
  it('builds the configured providers synchronously and reads each secret lazily, once', async () => {
    const config = buildFleetConfig({
      prefix: PREFIX,
      github: { appId: '1', organization: 'acme' },
      gitlab: { url: `${h.server.url}/gitlab` },
      pools: [{ name: 'docker', provider: Provider.GITLAB, labels: ['docker'], launchTemplateId: 'lt', launchTemplateVersion: '1', subnetIds: ['s'], instanceTypes: ['t3.micro'] }, { name: 'gh', provider: Provider.GITHUB, launchTemplateId: 'lt', launchTemplateVersion: '1', subnetIds: ['s'], instanceTypes: ['t3.micro'] }],
    });
    ssm.on(GetParameterCommand, { Name: ssmPaths(PREFIX).gitlab.token, WithDecryption: true }).resolves({ Parameter: { Value: apiToken } });
    const providers = createCiProviders(config, { ssm: new SSMClient({}) });
    expect(providers.github).toBeInstanceOf(GitHubApps);
    expect(ssm.calls()).toHaveLength(0);
    await providers.gitlab!.resolveLabels!(job());
    await providers.gitlab!.isJobQueued(job());
    expect(ssm.commandCalls(GetParameterCommand)).toHaveLength(1);
  });
  const glConfig = () =>
    buildFleetConfig({
      prefix: PREFIX,
      gitlab: { url: `${h.server.url}/gitlab`, runnerType: GitLabRunnerType.GROUP, scopeId: 12 },
      pools: [{ name: 'docker', provider: Provider.GITLAB, labels: ['docker'], launchTemplateId: 'lt', launchTemplateVersion: '1', subnetIds: ['s'], instanceTypes: ['t3.micro'] }],
    });

  it('a rotated API token reaches a warm provider through the real secret cache', async () => {
    let current = `glpat-${plantSecret('revoked')}`;
    ssm.on(GetParameterCommand, { Name: ssmPaths(PREFIX).gitlab.token, WithDecryption: true }).callsFake(() => ({ Parameter: { Value: current } }));
    const { gitlab: p } = createCiProviders(glConfig(), { ssm: new SSMClient({}) });
    expect((await failure(p!.resolveLabels!(job()))).status).toBe(401);
    current = apiToken; // the operator puts the new token into SSM
    expect(await p!.resolveLabels!(job())).toEqual(['docker', 'linux']);
    expect(ssm.commandCalls(GetParameterCommand)).toHaveLength(2);
  });

  it('logs and counts a runner list cut at the page cap', async () => {
    ssm.on(GetParameterCommand).resolves({ Parameter: { Value: apiToken } });
    for (let i = 0; i < 2001; i++) runners.push({ id: i + 1, description: `${PREFIX}-i-0000000${i}-x`, status: 'online', runner_type: 'group_type' });
    const lines: string[] = [];
    const metrics: string[] = [];
    const told: string[] = [];
    const { gitlab: p } = createCiProviders(glConfig(), {
      ssm: new SSMClient({}),
      logger: createLogger({}, (l) => lines.push(l)),
      metricSink: (l) => metrics.push(l),
      onListTruncated: (provider) => told.push(provider),
    });
    expect(await p!.listRunners()).toHaveLength(2000);
    // The sweep's signal that absence from this list means nothing.
    expect(told).toEqual(['gitlab']);
    expect(lines.map((l) => JSON.parse(l) as Record<string, unknown>)).toEqual([expect.objectContaining({ level: 'warn', provider: Provider.GITLAB, scope: 'group_type:12', pages: 20 })]);
    expect(metrics.map((l) => JSON.parse(l) as Record<string, unknown>)).toEqual([expect.objectContaining({ [METRIC_NAMES.runnerListTruncated]: 1 })]);
  });

  it('omits providers without a connection', () => {
    const config = buildFleetConfig({ gitlab: { url: 'https://gitlab.com' }, pools: [{ name: 'a', provider: Provider.GITLAB, launchTemplateId: 'lt', launchTemplateVersion: '1', subnetIds: ['s'], instanceTypes: ['t'] }] });
    expect(Object.keys(createCiProviders(config, { ssm: new SSMClient({}) }))).toEqual(['gitlab']);
  });
});
