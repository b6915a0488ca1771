import { GetParameterCommand, SSMClient } from '@aws-sdk/client-ssm';
import { mockClient } from 'aws-sdk-client-mock';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createCiProviders, GitHubApiError } from '../../lambdas/ci';
import { reconcileGitHub, GITHUB_RECONCILE_DEFAULTS, type GitHubReconcileApi } from '../../lambdas/reconcile/github';
import { RateBudget } from '../../lambdas/reconcile/rate-budget';
import { buildFleetConfig, JOB_MESSAGE_SCHEMA_VERSION, ssmPaths, Provider, type CiProvider, type FleetConfig, type JobMessage, type PoolInput } from '../../lambdas/shared/contract';
import { planSweep } from '../../lambdas/scale-down/sweep';
import { runnerIdKey, tagKeys } from '../../lambdas/shared/contract';
import { createLogger } from '../../lambdas/shared/log';
import { startLoopbackGitHub, type LoopbackGitHub } from '../../local/ci/github-server';

/**
 * The GitHub provider against the loopback GitHub of several organisations (each its own
 * installation of the App) and an enterprise (whose runner routes take only a classic PAT):
 * each pool registers where its scope says, and listing covers every scope once.
 */

const PREFIX = 'lgo';
const PAT = 'ghp_enterprise-token-for-tests';
const ssm = mockClient(SSMClient);
let gh: LoopbackGitHub;

const placement = { launchTemplateId: 'lt-0', launchTemplateVersion: '1', subnetIds: ['subnet-1'], instanceTypes: ['t3.micro'] };
function fleet(pools: Omit<PoolInput, 'provider' | keyof typeof placement>[]): FleetConfig {
  return buildFleetConfig({ prefix: PREFIX, github: { appId: gh.appId, organization: 'acme', apiUrl: gh.url }, pools: pools.map((p) => ({ provider: Provider.GITHUB, ...placement, ...p })) });
}

const provider = (config: FleetConfig): CiProvider => createCiProviders(config, { ssm: new SSMClient({ region: 'eu-west-1' }) }).github!;
/** One reconciler run over the loopback GitHub: every queued job found goes to `found`. */
const reconcile = (config: FleetConfig, found: JobMessage[], sink: (line: string) => void) =>
  reconcileGitHub({
    api: provider(config) as unknown as GitHubReconcileApi,
    github: config.github!,
    pools: config.pools,
    budget: new RateBudget(0.2, 10),
    options: { ...GITHUB_RECONCILE_DEFAULTS, minQueuedSeconds: 0, deliveryPages: 0 },
    now: () => new Date(),
    log: createLogger({ fn: 'test' }, sink),
    outOfTime: () => false,
    onFound: async (m) => void found.push(...m),
  });

function message(jobId: number, repository: string, pool: string): JobMessage {
  const [owner, project] = repository.split('/') as [string, string];
  return { schemaVersion: JOB_MESSAGE_SCHEMA_VERSION, provider: Provider.GITHUB, jobId: `github:${jobId}`, providerJobId: String(jobId), pool, owner, project, labels: ['linux'], labelsResolved: true, traceId: `t-${jobId}`, deliveryId: `d-${jobId}`, receivedAt: new Date().toISOString() };
}

const calls = () => gh.requests().map((r) => `${r.method} ${r.path} ${r.credential}`);
let serial = 0;
const instance = () => `i-0${(++serial).toString(16).padStart(16, '0')}`;

beforeEach(async () => {
  gh = await startLoopbackGitHub({ organization: 'acme', organizations: ['globex'], enterprise: { slug: 'umbrella', token: PAT } });
  ssm.reset();
  ssm.on(GetParameterCommand, { Name: ssmPaths(PREFIX).github.appPrivateKey }).resolves({ Parameter: { Value: gh.privateKeyPem } });
  ssm.on(GetParameterCommand, { Name: ssmPaths(PREFIX).githubEnterpriseToken }).resolves({ Parameter: { Value: PAT } });
});
afterEach(async () => gh.close());

describe('several organisations', () => {
  const pools = [
    { name: 'acme', labels: ['linux'] },
    { name: 'globex', labels: ['linux'], organization: 'globex' },
  ];

  it('registers each pool\'s runner in its own organisation, with that organisation\'s installation, and deletes it there', async () => {
    const p = provider(fleet(pools));
    const a = await p.createRunner(message(1, 'acme/app', 'acme'), instance(), 'acme');
    const g = await p.createRunner(message(2, 'globex/web', 'globex'), instance(), 'globex');
    expect(calls()).toEqual(
      expect.arrayContaining(['GET /orgs/acme/installation app', 'POST /orgs/acme/actions/runners/generate-jitconfig installation', 'GET /orgs/globex/installation app', 'POST /orgs/globex/actions/runners/generate-jitconfig installation']),
    );
    // The connection's organisation keeps its plain numeric runner ids; another organisation's name it.
    expect(a.runnerId).toMatch(/^\d+$/);
    expect(g.runnerId).toMatch(/^globex\/\d+$/);
    await p.deleteRunner(g.runnerId);
    await p.deleteRunner(a.runnerId);
    expect(calls().slice(-2)).toEqual([`DELETE /orgs/globex/actions/runners/${g.runnerId.split('/')[1]} installation`, `DELETE /orgs/acme/actions/runners/${a.runnerId} installation`]);
    expect(gh.runners()).toEqual([]);
  });

  it('refuses a job of another organisation than the pool\'s, before any call', async () => {
    const p = provider(fleet(pools));
    await expect(p.createRunner(message(3, 'acme/app', 'globex'), instance(), 'globex')).rejects.toThrow(/belongs to "acme", not to organisation "globex" of pool "globex"/);
    expect(calls()).toEqual([]);
  });

  it('an organisation the App is not installed on: GitHub answers 404 to the installation look-up, and the provider says so', async () => {
    const p = provider(fleet([{ name: 'initech', labels: ['linux'], organization: 'initech' }]));
    const e = await p.createRunner(message(4, 'initech/app', 'initech'), instance(), 'initech').catch((err: unknown) => err);
    expect(e).toBeInstanceOf(GitHubApiError);
    expect((e as GitHubApiError).status).toBe(404);
    expect(String(e)).toMatch(/is the App installed there\?/);
  });

  it('lists the runners of every organisation once, however many pools share it', async () => {
    const p = provider(fleet([...pools, { name: 'acme-big', labels: ['big'] }, { name: 'globex-big', labels: ['big'], organization: 'GLOBEX' }]));
    const a = await p.createRunner(message(5, 'acme/app', 'acme'), instance(), 'acme');
    const g = await p.createRunner(message(6, 'globex/web', 'globex-big'), instance(), 'globex-big');
    const before = gh.requests().length;
    const listed = await p.listRunners();
    expect(listed.map((r) => r.runnerId).sort()).toEqual([a.runnerId, g.runnerId].sort());
    expect(calls().slice(before)).toEqual(['GET /orgs/acme/actions/runners installation', 'GET /orgs/globex/actions/runners installation']);
    // The retry check's question: an organisation's runner takes only that organisation's jobs.
    expect(p.runnerServes?.(g.runnerId, message(7, 'globex/other', 'globex'))).toBe(true);
    expect(p.runnerServes?.(g.runnerId, message(8, 'acme/app', 'acme'))).toBe(false);
    expect(p.runnerServes?.(a.runnerId, message(8, 'acme/app', 'acme'))).toBe(true);
  });

  it("each organisation's runner takes its own organisation's job of the same labels, and the job names the scope it was registered in", async () => {
    const p = provider(fleet(pools));
    const acmeJob = gh.addJob('acme/app', ['self-hosted', 'linux']);
    const globexJob = gh.addJob('globex/web', ['self-hosted', 'linux']);
    // The globex runner connects first: the older acme job of its labels is not its organisation's.
    const g = await p.createRunner(message(globexJob.id, 'globex/web', 'globex'), instance(), 'globex');
    expect(await takeJob(g.secret)).toBe(globexJob.id);
    const a = await p.createRunner(message(acmeJob.id, 'acme/app', 'acme'), instance(), 'acme');
    expect(await takeJob(a.secret)).toBe(acmeJob.id);
    expect(gh.jobs().map((j) => [j.id, j.runnerScope])).toEqual([
      [acmeJob.id, 'org:acme'],
      [globexJob.id, 'org:globex'],
    ]);
  });

  it("logs each App-authenticated request's status: a 403 once the App's installation budget is spent", async () => {
    const p = provider(fleet(pools));
    await p.createRunner(message(10, 'acme/app', 'acme'), instance(), 'acme');
    gh.setRateLimitRemaining('installation', 0);
    await expect(p.createRunner(message(11, 'acme/app', 'acme'), instance(), 'acme')).rejects.toThrow(/rate limit/i);
    const statuses = gh.requests().map((r) => `${r.path} ${r.status}`);
    expect(statuses).toEqual([
      '/orgs/acme/installation 200',
      `/app/installations/${statuses[1]!.split('/')[3]}/access_tokens 201`,
      '/orgs/acme/actions/runners/generate-jitconfig 201',
      '/orgs/acme/actions/runners/generate-jitconfig 403',
    ]);
  });

  it('an installation token reaches its own organisation only (GitHub: 403, resource not accessible by integration)', async () => {
    const p = provider(fleet(pools));
    await p.createRunner(message(9, 'acme/app', 'acme'), instance(), 'acme');
    const token = await mintedToken();
    const res = await fetch(`${gh.url}/orgs/globex/actions/runners`, { headers: { authorization: `token ${token}` } });
    expect(res.status).toBe(403);
  });

  it('the reconciler reads the repositories of every organisation through its own installation', async () => {
    const config = fleet(pools);
    gh.addJob('acme/app', ['self-hosted', 'linux']);
    gh.addJob('globex/web', ['self-hosted', 'linux']);
    gh.addJob('initech/app', ['self-hosted', 'linux']); // an organisation no pool serves
    const found: JobMessage[] = [];
    const result = await reconcile(config, found, () => {});
    expect(result.errors).toBe(0);
    expect(found.map((m) => [m.owner, m.project, m.pool]).sort()).toEqual([
      ['acme', 'app', 'acme'],
      ['globex', 'web', 'globex'],
    ]);
  });
});

describe('one repository spelled two ways by two pools', () => {
  // GitHub's names are case-insensitive: the id tagged at registration and the id the sweep lists
  // must match however each pool spelled the repository, or the sweep ends a working instance.
  const pools = [
    { name: 'upper', labels: ['linux'], repositories: ['Acme/App'] },
    { name: 'lower', labels: ['big'], repositories: ['acme/app'] },
  ];
  const keys = tagKeys(PREFIX);
  const NOW = new Date();
  const working = (instanceId: string, pool: string, runnerId: string) => ({
    id: instanceId,
    state: 'running',
    launchTime: new Date(NOW.getTime() - 30 * 60_000),
    tags: new Map([
      [keys.pool, pool],
      [keys.activatedAt, new Date(NOW.getTime() - 20 * 60_000).toISOString()],
      [keys.jobId, 'github:1'],
      [keys.runnerId, runnerId],
    ]),
  });

  it('the registering pool and the listing agree on the id, and the sweep keeps the working instance', async () => {
    const config = fleet(pools);
    const p = provider(config);
    const id = instance();
    const r = await p.createRunner(message(20, 'acme/app', 'lower'), id, 'lower');
    const listed = await p.listRunners();
    expect(listed.map((x) => x.runnerId)).toEqual([r.runnerId]);
    const plan = planSweep(config, keys, [working(id, 'lower', r.runnerId)], [], new Map([[Provider.GITHUB, listed]]), NOW);
    expect(plan.terminate).toEqual([]);
    expect(plan.deleteRunners).toEqual([]);
  });

  it('an id tagged in another spelling by an earlier version still matches the listed one', async () => {
    const config = fleet(pools);
    const p = provider(config);
    const id = instance();
    const r = await p.createRunner(message(21, 'Acme/App', 'upper'), id, 'upper');
    const listed = await p.listRunners();
    const tagged = r.runnerId.replace('acme/app', 'Acme/App');
    expect(runnerIdKey(tagged)).toBe(r.runnerId);
    const plan = planSweep(config, keys, [working(id, 'upper', tagged)], [], new Map([[Provider.GITHUB, listed]]), NOW);
    expect(plan.terminate).toEqual([]);
    expect(plan.deleteRunners).toEqual([]);
  });
});

describe('the reconciler with one organisation near its rate limit', () => {
  it("skips that organisation's repositories and reads the other's, logging the one held back", async () => {
    const config = fleet([
      { name: 'acme', labels: ['linux'] },
      { name: 'globex', labels: ['linux'], organization: 'globex' },
    ]);
    for (const r of ['acme/app', 'acme/web', 'globex/web', 'globex/api']) gh.addJob(r, ['self-hosted', 'linux']);
    // Reserve: 20% of 5000. acme's installation has 2 requests left above it.
    gh.setRateLimitRemaining('installation', 1002, undefined, 'acme');
    const found: JobMessage[] = [];
    const lines: string[] = [];
    const result = await reconcile(config, found, (l) => void lines.push(l));
    expect(result.stoppedAt).toBeUndefined();
    expect(found.filter((m) => m.owner === 'globex').map((m) => m.project).sort()).toEqual(['api', 'web']);
    expect(lines.filter((l) => l.includes('reached the reconciler'))).toEqual([expect.stringContaining('"account":"acme"')]);
    // Once held back, acme is asked nothing more in this run.
    const afterHeld = gh.requests().filter((r) => r.path.startsWith('/repos/acme/'));
    expect(afterHeld.length).toBeLessThanOrEqual(2);
  });
});

describe('enterprise runners', () => {
  const pools = [{ name: 'ent', labels: ['linux'], enterprise: 'umbrella' }];

  it('registers at the enterprise with the classic PAT (no App token), and lists and deletes there', async () => {
    const p = provider(fleet(pools));
    const r = await p.createRunner(message(10, 'acme/app', 'ent'), instance(), 'ent');
    expect(r.runnerId).toMatch(/^enterprise:umbrella\/\d+$/);
    expect(calls()).toEqual(['POST /enterprises/umbrella/actions/runners/generate-jitconfig pat']);
    expect((await p.listRunners()).map((x) => x.runnerId)).toEqual([r.runnerId]);
    await p.deleteRunner(r.runnerId);
    expect(calls().slice(-2)).toEqual(['GET /enterprises/umbrella/actions/runners pat', `DELETE /enterprises/umbrella/actions/runners/${r.runnerId.split('/')[1]} pat`]);
    expect(gh.runners()).toEqual([]);
  });

  it('GitHub refuses an installation token on the enterprise routes (403), and a wrong PAT (401)', async () => {
    const p = provider(fleet([{ name: 'acme', labels: ['linux'] }]));
    await p.createRunner(message(11, 'acme/app', 'acme'), instance(), 'acme');
    const token = await mintedToken();
    expect((await fetch(`${gh.url}/enterprises/umbrella/actions/runners`, { headers: { authorization: `token ${token}` } })).status).toBe(403);
    expect((await fetch(`${gh.url}/enterprises/umbrella/actions/runners`, { headers: { authorization: 'token ghp_wrong' } })).status).toBe(401);
  });

  it('a refused PAT is read again from SSM (a rotated token)', async () => {
    let reads = 0;
    ssm.on(GetParameterCommand, { Name: ssmPaths(PREFIX).githubEnterpriseToken }).callsFake(() => ({ Parameter: { Value: ++reads === 1 ? 'ghp_old' : PAT } }));
    const p = provider(fleet(pools));
    const r = await p.createRunner(message(12, 'acme/app', 'ent'), instance(), 'ent');
    expect(r.runnerId).toMatch(/^enterprise:umbrella\//);
    expect(reads).toBe(2);
  });
});

/** An installation token the loopback minted, minted here the way auth-app does (for the raw requests above). */
async function mintedToken(): Promise<string> {
  const { createAppAuth } = await import('@octokit/auth-app');
  const { request } = await import('@octokit/request');
  const auth = createAppAuth({ appId: gh.appId, privateKey: gh.privateKeyPem, request: request.defaults({ baseUrl: gh.url }) });
  const res = await fetch(`${gh.url}/orgs/acme/installation`, { headers: { authorization: `bearer ${(await auth({ type: 'app' })).token}` } });
  const { id } = (await res.json()) as { id: number };
  return (await auth({ type: 'installation', installationId: id })).token;
}

/** The fake runner's first two calls (local/runner/run.sh): connect with the JIT config's secret, then ask for a job. */
async function takeJob(encodedJitConfig: string): Promise<number | undefined> {
  const jit = JSON.parse(Buffer.from(encodedJitConfig, 'base64').toString()) as { url: string; runnerId: number; secret: string };
  const call = (action: string) => fetch(`${jit.url}/_local/github/runners/${jit.runnerId}/${action}`, { method: 'POST', headers: { authorization: `token ${jit.secret}` } });
  expect((await call('session')).status).toBe(200);
  const res = await call('acquire');
  return res.status === 200 ? ((await res.json()) as { jobId: number }).jobId : undefined;
}
