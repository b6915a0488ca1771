import { generateKeyPairSync, verify } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { GitHubApiError, GitHubProvider, type GitHubProviderOptions } from '../../lambdas/ci/github';
import { GetParameterCommand, SSMClient } from '@aws-sdk/client-ssm';
import { mockClient } from 'aws-sdk-client-mock';
import { createCiProviders } from '../../lambdas/ci';
import { buildFleetConfig, JOB_MESSAGE_SCHEMA_VERSION, JobLookupError, runnerName, ssmPaths, Provider, type JobMessage } from '../../lambdas/shared/contract';
import type { Answer, SeenRequest } from '../support/loopback';
import { checkGitHubQuery } from '../../local/ci/github-bounds';
import { providerLoopback } from './provider-loopback';
import { plantSecret, secretForms } from '../webhook/support';

// GitHub hands out PKCS#1 PEM keys ("BEGIN RSA PRIVATE KEY").
const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048, privateKeyEncoding: { type: 'pkcs1', format: 'pem' }, publicKeyEncoding: { type: 'spki', format: 'pem' } });
const PREFIX = 'ghp-test';
const T0 = Date.parse('2026-11-29T19:00:00Z');
const INSTANCE = 'i-0123456789abcdef0';

let tokensMinted = 0;
const issuedTokens: string[] = [];
const jitConfigs: string[] = [];
let now = T0;
let runners: { id: number; name: string; status: string; busy: boolean }[] = [];

/** GitHub's documented shapes: app JWT for installation routes, installation tokens for the rest. */
function github(req: SeenRequest): Answer | 'hang' {
  const auth = req.headers.authorization ?? '';
  const url = new URL(req.path, 'http://x');
  const appRoute = /^\/(orgs\/[^/]+|repos\/[^/]+\/[^/]+)\/installation$/.test(url.pathname) || url.pathname.startsWith('/app/');
  if (appRoute) {
    const jwt = auth.replace(/^bearer /i, '');
    const [h, p, s] = jwt.split('.');
    if (!h || !p || !s || !verify('RSA-SHA256', Buffer.from(`${h}.${p}`), publicKey, Buffer.from(s, 'base64url'))) {
      return { status: 401, body: { message: 'A JSON web token could not be decoded' } };
    }
    if (JSON.parse(Buffer.from(p, 'base64url').toString()).iss !== '4242') return { status: 401, body: { message: 'bad iss' } };
    const inst = /^\/(?:orgs\/([^/]+)|repos\/([^/]+)\/([^/]+))\/installation$/.exec(url.pathname);
    if (inst && req.method === 'GET') {
      if (inst[1] === 'acme') return { status: 200, body: { id: 77, account: { login: 'acme' } } };
      if (inst[2] === 'o1' || inst[2] === 'o2' || inst[2] === 'o3') return { status: 200, body: { id: 100 + Number(inst[2].slice(1)) } };
      return { status: 404, body: { message: 'Not Found' } };
    }
    const tok = /^\/app\/installations\/(\d+)\/access_tokens$/.exec(url.pathname);
    if (tok && req.method === 'POST') {
      tokensMinted++;
      const token = `ghs_${plantSecret('inst-token').replace(/-/g, '')}`;
      issuedTokens.push(token);
      return { status: 201, body: { token, expires_at: new Date(now + 60 * 60_000).toISOString(), permissions: { organization_self_hosted_runners: 'write' }, repository_selection: 'all' } };
    }
    return { status: 404, body: { message: 'Not Found' } };
  }
  if (!issuedTokens.includes(auth.replace(/^token /, ''))) return { status: 401, body: { message: 'Bad credentials' } };
  // GitHub's documented query bounds, as the sandbox's loopback GitHub checks them.
  const window = checkGitHubQuery(req.method, url.pathname, url.searchParams);
  if ('refusal' in window) return window.refusal;
  const jit = /^\/(?:orgs\/([^/]+)|repos\/([^/]+)\/([^/]+))\/actions\/runners\/generate-jitconfig$/.exec(url.pathname);
  if (jit && req.method === 'POST') {
    const body = JSON.parse(req.body) as { name?: string; runner_group_id?: number; labels?: string[] };
    if (!body.name || !body.runner_group_id || !body.labels?.length) return { status: 422, body: { message: 'Invalid request.' } };
    if (runners.some((r) => r.name === body.name)) return { status: 409, body: { message: 'Already exists - A runner with the same name already exists' } };
    const encoded = Buffer.from(plantSecret('jit')).toString('base64');
    jitConfigs.push(encoded);
    const runner = { id: 23 + runners.length, name: body.name, status: 'offline', busy: false };
    runners.push(runner);
    return { status: 201, body: { runner: { ...runner, os: 'unknown', labels: body.labels.map((name, id) => ({ id, name, type: 'custom' })) }, encoded_jit_config: encoded } };
  }
  if (/^\/(?:orgs\/[^/]+|repos\/[^/]+\/[^/]+)\/actions\/runners$/.test(url.pathname) && req.method === 'GET') {
    const { perPage: per, page } = window;
    return { status: 200, body: { total_count: runners.length, runners: runners.slice((page - 1) * per, page * per).map((r) => ({ ...r, os: 'linux', labels: [] })) } };
  }
  const del = /\/actions\/runners\/(\d+)$/.exec(url.pathname);
  if (del && req.method === 'DELETE') {
    const i = runners.findIndex((r) => r.id === Number(del[1]));
    if (i < 0) return { status: 404, body: { message: 'Not Found' } };
    if (runners[i]!.busy) return { status: 422, body: { message: 'Bad request - Runner "x" is still running a job"' } };
    runners.splice(i, 1);
    return { status: 204 };
  }
  const job = /^\/repos\/([^/]+)\/([^/]+)\/actions\/jobs\/(\d+)$/.exec(url.pathname);
  if (job && req.method === 'GET') {
    const status = { '555': 'queued', '556': 'in_progress', '557': 'completed' }[job[3]!];
    return status ? { status: 200, body: { id: Number(job[3]), status, labels: ['self-hosted', 'linux'] } } : { status: 404, body: { message: 'Not Found' } };
  }
  return { status: 404, body: { message: 'Not Found' } };
}

function provider(connection: Partial<GitHubProviderOptions['github']> = {}, extra: Partial<GitHubProviderOptions> = {}) {
  const config = buildFleetConfig({
    prefix: PREFIX,
    github: { appId: '4242', organization: 'acme', apiUrl: h.server.url, runnerGroupId: 3 },
    pools: [{ name: 'linux', provider: Provider.GITHUB, labels: ['linux', 'x64'], launchTemplateId: 'lt', launchTemplateVersion: '1', subnetIds: ['s'], instanceTypes: ['t3.micro'] }],
  });
  return new GitHubProvider({
    ...h.providerBase(config),
    github: { ...config.github!, ...connection },
    privateKey: async () => privateKey,
    now: () => now,
    ...extra,
  });
}

const job = (over: Partial<JobMessage> = {}): JobMessage => ({
  schemaVersion: JOB_MESSAGE_SCHEMA_VERSION,
  provider: Provider.GITHUB,
  jobId: 'github:555',
  providerJobId: '555',
  pool: 'linux',
  owner: 'acme',
  project: 'app',
  labels: ['self-hosted', 'linux'],
  labelsResolved: true,
  traceId: 't-1',
  deliveryId: 'd-1',
  receivedAt: new Date(T0).toISOString(),
  ...over,
});

const h = providerLoopback(github, () => {
  tokensMinted = 0;
  now = T0;
  runners = [];
});
const { faults, waits, errors } = h;
const failure = (p: Promise<unknown>) => h.failure(p, GitHubApiError);

describe('GitHubProvider against a loopback GitHub', () => {
  it('creates an organisation JIT runner named for the activation, with the pool labels and runner group', async () => {
    const reg = await provider().createRunner(job(), INSTANCE, 'linux');
    expect(reg).toEqual({ runnerId: '23', name: runnerName(PREFIX, INSTANCE, new Date(T0)), secret: jitConfigs.at(-1) });
    const post = h.server.requests.find((r) => r.path === '/orgs/acme/actions/runners/generate-jitconfig')!;
    expect(JSON.parse(post.body)).toEqual({ name: reg.name, runner_group_id: 3, labels: ['self-hosted', 'linux', 'x64'], work_folder: '_work' });
    expect(post.headers['x-github-api-version']).toBe('2022-11-28');
  });

  it('creates and deletes repository runners at the repository, with an owner/repo/id runner id', async () => {
    const p = provider({ organization: undefined, repositories: ['o1/app'] });
    const reg = await p.createRunner(job({ owner: 'o1', project: 'app' }), INSTANCE, 'linux');
    expect(reg.runnerId).toBe('o1/app/23');
    expect(h.server.requests.map((r) => `${r.method} ${r.path}`)).toContain('POST /repos/o1/app/actions/runners/generate-jitconfig');
    await p.deleteRunner(reg.runnerId);
    expect(h.server.requests.at(-1)).toMatchObject({ method: 'DELETE', path: '/repos/o1/app/actions/runners/23' });
    await expect(p.createRunner(job({ owner: 'o2', project: 'app' }), INSTANCE, 'linux')).rejects.toThrow(/is not one of pool "linux"'s repositories/);
  });

  it('says which jobs a runner may take: a repository runner only its repository\'s, an organisation runner any', () => {
    const repos = provider({ organization: undefined, repositories: ['o1/app', 'o2/app'] });
    expect(repos.runnerServes('o1/app/23', job({ owner: 'o1', project: 'app' }))).toBe(true);
    expect(repos.runnerServes('O1/App/23', job({ owner: 'o1', project: 'app' }))).toBe(true);
    expect(repos.runnerServes('o1/app/23', job({ owner: 'o2', project: 'app' }))).toBe(false);
    expect(repos.runnerServes('o1/app/23', job({ owner: 'o1', project: 'web' }))).toBe(false);
    expect(repos.runnerServes('23', job({ owner: 'o1', project: 'app' }))).toBe(false);
    expect(provider().runnerServes('23', job({ project: 'any' }))).toBe(true);
    expect(h.server.requests).toHaveLength(0);
  });

  it('refuses jobs of another organisation and unknown pools before calling GitHub', async () => {
    await expect(provider().createRunner(job({ owner: 'evil' }), INSTANCE, 'linux')).rejects.toThrow(/not to organisation/);
    await expect(provider().createRunner(job(), INSTANCE, 'nope')).rejects.toThrow(/not a GitHub pool/);
    expect(h.server.requests).toHaveLength(0);
  });

  it('mints an installation token once, reuses it, and replaces it before it expires', async () => {
    const p = provider();
    await p.listRunners();
    await p.listRunners();
    expect(tokensMinted).toBe(1);
    now = T0 + 54 * 60_000; // 6 minutes left: still beyond the 5-minute margin
    await p.listRunners();
    expect(tokensMinted).toBe(1);
    now = T0 + 56 * 60_000; // 4 minutes left: replaced
    await p.listRunners();
    expect(tokensMinted).toBe(2);
  });

  it('keeps a bounded number of installation tokens', async () => {
    const p = provider({ organization: undefined, repositories: ['o1/a', 'o2/a', 'o3/a'] }, { maxCachedInstallations: 2 });
    await p.listRunners();
    expect(tokensMinted).toBe(3);
    expect(p.cachedTokenCount).toBe(2);
  });

  it('lists only the fleet runners, across pages', async () => {
    for (let i = 0; i < 130; i++) runners.push({ id: 1000 + i, name: i % 2 ? `${PREFIX}-i-0000000${i}-abc` : `someone-else-${i}`, status: 'online', busy: i % 3 === 0 });
    // Another fleet whose prefix extends ours, and a hand-made runner that merely starts with our prefix.
    runners.push({ id: 2000, name: `${PREFIX}-b-i-00000001-abc`, status: 'online', busy: false }, { id: 2001, name: `${PREFIX}-manual`, status: 'online', busy: false });
    const list = await provider().listRunners();
    expect(list).toHaveLength(65);
    expect(list.every((r) => r.name.startsWith(`${PREFIX}-`))).toBe(true);
    expect(list[0]).toEqual({ runnerId: '1001', name: `${PREFIX}-i-00000001-abc`, status: 'online', busy: false });
    expect(h.server.requests.filter((r) => r.path.startsWith('/orgs/acme/actions/runners?')).map((r) => new URL(r.path, 'http://x').searchParams.get('page'))).toEqual(['1', '2']);
  });

  it('deletes a runner; a runner already gone is fine; a busy one (422) is an error', async () => {
    runners.push({ id: 40, name: `${PREFIX}-a`, status: 'online', busy: false }, { id: 41, name: `${PREFIX}-b`, status: 'online', busy: true });
    const p = provider();
    await p.deleteRunner('40');
    await p.deleteRunner('40');
    expect((await failure(p.deleteRunner('41'))).status).toBe(422);
    await expect(p.deleteRunner('o1/app/x')).rejects.toThrow(/not a runner id/);
  });

  it('tells whether a job still waits for a runner', async () => {
    const p = provider();
    expect(await p.isJobQueued(job())).toBe(true);
    expect(await p.isJobQueued(job({ providerJobId: '556', jobId: 'github:556' }))).toBe(false);
    expect(await p.isJobQueued(job({ providerJobId: '557', jobId: 'github:557' }))).toBe(false);
    // 404 is "gone" or "the App cannot see it": a typed error the caller counts, never a silent false.
    const gone = await p.isJobQueued(job({ providerJobId: '999', jobId: 'github:999' })).catch((e: unknown) => e);
    expect(gone).toBeInstanceOf(JobLookupError);
    expect(gone).toMatchObject({ provider: Provider.GITHUB, jobId: 'github:999', reason: 'not-found' });
    await expect(p.resolveLabels(job({ providerJobId: '999', jobId: 'github:999' }))).rejects.toBeInstanceOf(JobLookupError);
    expect(await p.resolveLabels(job())).toEqual(['self-hosted', 'linux']);
  });

  it('mints one installation token for a burst of concurrent calls (single flight)', async () => {
    const p = provider();
    const regs = await Promise.all(Array.from({ length: 5 }, (_, i) => p.createRunner(job(), `i-0123456789abcdef${i}`, 'linux')));
    expect(regs).toHaveLength(5);
    expect(tokensMinted).toBe(1);
    expect(h.server.requests.filter((r) => r.path.endsWith('/installation'))).toHaveLength(1);
  });

  it('retries a call once with a fresh token after a 401, then gives up', async () => {
    const p = provider();
    await p.listRunners();
    faults.push((r) => (r.path.includes('/actions/runners?') ? { status: 401, body: { message: 'Bad credentials' } } : undefined));
    await p.listRunners();
    expect(tokensMinted).toBe(2);
    expect(waits).toEqual([]);
    // The fresh token is refused too: one retry only, then the 401 is reported.
    for (let i = 0; i < 2; i++) faults.push((r) => (r.path.includes('generate-jitconfig') ? { status: 401, body: { message: 'Bad credentials' } } : undefined));
    expect((await failure(p.createRunner(job(), INSTANCE, 'linux'))).status).toBe(401);
    expect(h.server.requests.filter((r) => r.path.includes('generate-jitconfig'))).toHaveLength(2);
    expect(tokensMinted).toBe(3);
  });

  it.each([404, 401])('looks the installation up again after minting a token answers %i (App reinstalled)', async (status) => {
    const p = provider();
    await p.listRunners();
    now = T0 + 56 * 60_000; // the token needs replacing
    faults.push((r) => (r.path.includes('/access_tokens') ? { status, body: { message: status === 404 ? 'Not Found' : 'Bad credentials' } } : undefined));
    expect((await failure(p.listRunners())).status).toBe(status);
    await p.listRunners();
    expect(h.server.requests.filter((r) => r.path === '/orgs/acme/installation')).toHaveLength(2);
  });

  it('tells its owner to read the private key again when GitHub refuses the JWT', async () => {
    let invalidated = 0;
    const p = provider({}, { invalidatePrivateKey: () => invalidated++ });
    faults.push((r) => (r.path.includes('/access_tokens') ? { status: 401, body: { message: 'A JSON web token could not be decoded' } } : undefined));
    await failure(p.listRunners());
    expect(invalidated).toBe(1);
    faults.push((r) => (r.path === '/orgs/acme/installation' ? { status: 401, body: { message: 'A JSON web token could not be decoded' } } : undefined));
    await failure(p.listRunners());
    expect(invalidated).toBe(2);
    await p.listRunners();
    expect(invalidated).toBe(2);
  });

  it('reports a runner list cut at the page cap', async () => {
    const seen: unknown[] = [];
    for (let i = 0; i < 130; i++) runners.push({ id: 1000 + i, name: `${PREFIX}-i-0000000${i}-abc`, status: 'online', busy: false });
    await provider({}, { maxPages: 1, onListTruncated: (info) => seen.push(info) }).listRunners();
    expect(seen).toEqual([{ scope: 'org:acme', pages: 1 }]);
    await provider({}, { maxPages: 2, onListTruncated: (info) => seen.push(info) }).listRunners();
    expect(seen).toHaveLength(1);
  });

  it('waits out a 429 retry-after and a 403 with an exhausted x-ratelimit-reset, within the bound', async () => {
    const p = provider();
    faults.push((r) => (r.path.includes('/actions/runners?') ? { status: 429, headers: { 'retry-after': '2' }, body: { message: 'secondary rate limit' } } : undefined));
    faults.push((r) => (r.path.includes('/actions/runners?') ? { status: 403, headers: { 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': String(T0 / 1000 + 4) }, body: { message: 'API rate limit exceeded' } } : undefined));
    await p.listRunners();
    expect(waits).toEqual([3000, 5000]);
  });

  it('fails fast when the rate limit asks for longer than the bound, and on a plain 403', async () => {
    const p = provider();
    faults.push((r) => (r.path.includes('/actions/runners?') ? { status: 403, headers: { 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': String(T0 / 1000 + 3600) }, body: { message: 'API rate limit exceeded' } } : undefined));
    expect((await failure(p.listRunners())).message).toMatch(/beyond the 10 s bound/);
    faults.push((r) => (r.path.includes('generate-jitconfig') ? { status: 403, body: { message: 'Resource not accessible by integration' } } : undefined));
    const e = await failure(p.createRunner(job(), INSTANCE, 'linux'));
    expect([e.status, e.message]).toEqual([403, expect.stringMatching(/Resource not accessible/)]);
    expect(waits).toEqual([]);
  });

  it('retries 5xx for safe calls only', async () => {
    const p = provider();
    faults.push((r) => (r.path.includes('/actions/runners?') ? { status: 502, body: { message: 'Bad gateway' } } : undefined));
    await p.listRunners();
    expect(waits).toEqual([500]);
    faults.push((r) => (r.path.includes('generate-jitconfig') ? { status: 500, body: { message: 'Server Error' } } : undefined));
    expect((await failure(p.createRunner(job(), INSTANCE, 'linux'))).status).toBe(500);
    expect(h.server.requests.filter((r) => r.path.includes('generate-jitconfig'))).toHaveLength(1);
  });

  it('reports 401 (bad App credentials), 404 (App not installed) and 422 (invalid request)', async () => {
    faults.push((r) => (r.path.includes('/access_tokens') ? { status: 401, body: { message: 'A JSON web token could not be decoded' } } : undefined));
    expect((await failure(provider().listRunners())).status).toBe(401);
    expect((await failure(provider({ organization: 'nobody' }).listRunners())).message).toMatch(/look up installation.*404/);
    faults.push((r) => (r.path.includes('generate-jitconfig') ? { status: 422, body: { message: 'Invalid request.' } } : undefined));
    expect((await failure(provider().createRunner(job(), INSTANCE, 'linux'))).status).toBe(422);
  });

  it('reads the private key again after GitHub refuses the JWT (a rotated key)', async () => {
    let reads = 0;
    const p = provider({}, { privateKey: async () => (++reads === 1 ? generateKeyPairSync('rsa', { modulusLength: 2048, privateKeyEncoding: { type: 'pkcs1', format: 'pem' }, publicKeyEncoding: { type: 'spki', format: 'pem' } }).privateKey : privateKey) });
    expect((await failure(p.listRunners())).status).toBe(401);
    await p.listRunners();
    expect(reads).toBe(2);
  });

  it('a rotated private key reaches a warm provider through the real secret cache', async () => {
    const ssm = mockClient(SSMClient);
    try {
      const stale = generateKeyPairSync('rsa', { modulusLength: 2048, privateKeyEncoding: { type: 'pkcs1', format: 'pem' }, publicKeyEncoding: { type: 'spki', format: 'pem' } }).privateKey;
      let current = stale;
      ssm.on(GetParameterCommand, { Name: ssmPaths(PREFIX).github.appPrivateKey, WithDecryption: true }).callsFake(() => ({ Parameter: { Value: current } }));
      const config = buildFleetConfig({
        prefix: PREFIX,
        github: { appId: '4242', organization: 'acme', apiUrl: h.server.url, runnerGroupId: 3 },
        pools: [{ name: 'linux', provider: Provider.GITHUB, labels: ['linux'], launchTemplateId: 'lt', launchTemplateVersion: '1', subnetIds: ['s'], instanceTypes: ['t3.micro'] }],
      });
      const { github: p } = createCiProviders(config, { ssm: new SSMClient({}) });
      expect((await failure(p!.listRunners())).status).toBe(401);
      current = privateKey; // the operator puts the App's new key into SSM
      await p!.listRunners();
      expect(ssm.commandCalls(GetParameterCommand)).toHaveLength(2);
    } finally {
      ssm.restore();
    }
  });

  it('bounds every call in time: a GitHub that never answers', async () => {
    const p = provider({}, { timeoutMs: 300 });
    faults.push((r) => (r.path.includes('generate-jitconfig') ? 'hang' : undefined));
    expect((await failure(p.createRunner(job(), INSTANCE, 'linux'))).message).toMatch(/timed out/);
  });

  it('never puts the private key, installation tokens or JIT configs in an error', () => {
    expect(errors.length).toBeGreaterThan(5);
    const all = [...errors, ...h.consoleLines].join('\n');
    for (const secret of [privateKey.split('\n')[1]!, ...issuedTokens, ...jitConfigs]) for (const form of secretForms(secret)) expect(all.includes(form)).toBe(false);
  });
});
