import { generateKeyPairSync } from 'node:crypto';
import { GetParameterCommand, SSMClient } from '@aws-sdk/client-ssm';
import { mockClient } from 'aws-sdk-client-mock';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createCiProviders, GitHubApiError } from '../../lambdas/ci';
import { AppBudgets, installationBudget } from '../../lambdas/ci/github-apps';
import { buildFleetConfig, JOB_MESSAGE_SCHEMA_VERSION, METRIC_NAMES, Provider, ssmPaths, type FleetConfig, type JobMessage } from '../../lambdas/shared/contract';
import { createLogger } from '../../lambdas/shared/log';
import { startLoopbackGitHub, type LoopbackGitHub } from '../../local/ci/github-server';

const PREFIX = 'apps-test';
const ORG = 'acme';
const APP_1 = '5001';
const APP_2 = '5002';

/** Rate-limit headers as GitHub sends them (reset in Unix seconds). */
const headers =
  (limit: number, remaining: number, resetS: number) =>
  (name: string): string | undefined =>
    ({ 'x-ratelimit-limit': String(limit), 'x-ratelimit-remaining': String(remaining), 'x-ratelimit-reset': String(resetS) })[name];


/** A queued GitHub job of `owner/app` as the webhook hands it to scale-up. */
function githubJob(jobId: number, owner: string, pool: string): JobMessage {
  return {
    schemaVersion: JOB_MESSAGE_SCHEMA_VERSION,
    provider: Provider.GITHUB,
    jobId: `github:${jobId}`,
    providerJobId: String(jobId),
    pool,
    owner,
    project: 'app',
    labels: ['self-hosted', 'linux'],
    labelsResolved: true,
    traceId: 't',
    deliveryId: `d-${jobId}`,
    receivedAt: new Date().toISOString(),
  };
}
describe('AppBudgets: which App a call spends', () => {
  const T = 1_800_000_000_000;
  let now = T;
  const budgets = () => new AppBudgets(['1', '2', '3'], () => now);
  const inst = installationBudget('Acme');
  beforeEach(() => (now = T));

  it('an App not heard from counts as full; otherwise the one with the most left, ties to the earlier App', () => {
    const b = budgets();
    expect(b.choose(['1', '2', '3'], inst)).toBe('1');
    b.observe('1', inst, 200, headers(5000, 100, T / 1000 + 3600));
    expect(b.choose(['1', '2', '3'], inst)).toBe('2'); // 2 and 3 unknown: full; 2 first
    b.observe('2', inst, 200, headers(5000, 300, T / 1000 + 3600));
    b.observe('3', inst, 200, headers(5000, 4000, T / 1000 + 3600));
    expect(b.choose(['1', '2', '3'], inst)).toBe('3');
    // Budgets are per installation account: another account's is unknown, so full.
    expect(b.choose(['1', '2'], installationBudget('other'))).toBe('1');
  });

  it('skips an App with nothing left or refused for its rate limit until its reset, then counts it as whole', () => {
    const b = budgets();
    b.observe('1', inst, 200, headers(5000, 0, T / 1000 + 60));
    b.observe('2', inst, 403, headers(5000, 0, T / 1000 + 120));
    b.observe('3', inst, 200, headers(5000, 10, T / 1000 + 3600));
    expect(b.exhausted('1', inst)).toBe(true);
    expect(b.choose(['1', '2', '3'], inst)).toBe('3');
    expect(b.choose(['1', '2'], inst)).toBeUndefined();
    expect(b.soonest(['2', '1'], inst)).toBe('1');
    now = T + 61_000; // App 1's hour is over: whole again (5000 > 10)
    expect(b.exhausted('1', inst)).toBe(false);
    expect(b.choose(['1', '2', '3'], inst)).toBe('1');
  });

  it('a secondary rate limit (429, retry-after) skips the App for the wait it asks', () => {
    const b = budgets();
    b.observe('1', 'app', 429, (h) => (h === 'retry-after' ? '30' : undefined));
    expect(b.exhausted('1', 'app')).toBe(true);
    expect(b.refusedSince('1', T)).toBe(true);
    expect(b.choose(['1', '2'], 'app')).toBe('2');
    now = T + 31_000;
    expect(b.choose(['1', '2'], 'app')).toBe('1');
  });

  it('figures come from x-ratelimit-* alone: a secondary rate limit skips the App in the choice, not in the metrics', () => {
    const b = budgets();
    b.observe('1', inst, 403, (h) => ({ 'retry-after': '30', 'x-ratelimit-limit': '5000', 'x-ratelimit-remaining': '4000', 'x-ratelimit-reset': String(T / 1000 + 3600) })[h]);
    expect(b.choose(['1', '2'], inst)).toBe('2');
    expect(b.figures()).toEqual([{ appId: '1', remaining: 4000, limit: 5000 }]);
    expect(b.bestRemainingFraction()).toBe(1);
  });

  it('a 401 answer (the unauthenticated limit of 60) records no figures', () => {
    const b = budgets();
    b.observe('1', 'app', 401, headers(60, 0, T / 1000 + 3600));
    expect(b.figures()).toEqual([]);
    expect(b.exhausted('1', 'app')).toBe(false);
  });

  it('nothing left without a reset time (GitHub Enterprise Server) counts as exhausted for a minute only', () => {
    const b = budgets();
    b.observe('1', inst, 200, (h) => ({ 'x-ratelimit-limit': '5000', 'x-ratelimit-remaining': '0' })[h]);
    expect(b.exhausted('1', inst)).toBe(true);
    now = T + 59_000;
    expect(b.exhausted('1', inst)).toBe(true);
    now = T + 61_000;
    expect(b.exhausted('1', inst)).toBe(false);
  });

  it('the alarm figure: the best App fraction left, an App not heard from counting as 1', () => {
    const b = budgets();
    b.observe('1', inst, 200, headers(5000, 50, T / 1000 + 3600));
    b.observe('2', inst, 200, headers(5000, 100, T / 1000 + 3600));
    expect(b.bestRemainingFraction()).toBe(1);
    b.observe('3', 'app', 200, headers(5000, 250, T / 1000 + 3600));
    expect(b.bestRemainingFraction()).toBe(0.05);
    // Per App its most spent budget.
    b.observe('3', inst, 200, headers(5000, 4000, T / 1000 + 3600));
    expect(b.figures()).toEqual([
      { appId: '1', remaining: 50, limit: 5000 },
      { appId: '2', remaining: 100, limit: 5000 },
      { appId: '3', remaining: 250, limit: 5000 },
    ]);
  });
});

describe('two GitHub Apps against the loopback GitHub', () => {
  let gh: LoopbackGitHub;
  const ssm = mockClient(SSMClient);
  let config: FleetConfig;
  let metricLines: string[] = [];
  /** Each App's key as SSM holds it now (a test may plant a stale one). */
  const keys = new Map<string, string>();

  beforeAll(async () => {
    gh = await startLoopbackGitHub({ organization: ORG, appId: APP_1, additionalAppIds: [APP_2], rateLimit: 1000 });
    config = buildFleetConfig({
      prefix: PREFIX,
      github: { appId: APP_1, additionalAppIds: [APP_2], organization: ORG, apiUrl: gh.url },
      pools: [{ name: 'linux', provider: Provider.GITHUB, labels: ['linux'], launchTemplateId: 'lt', launchTemplateVersion: '1', subnetIds: ['s'], instanceTypes: ['t3.micro'] }],
    });
  });
  afterAll(async () => gh.close());
  beforeEach(() => {
    metricLines = [];
    for (const app of gh.apps) keys.set(app.appId, app.privateKeyPem);
    ssm.reset();
    const paths = ssmPaths(PREFIX);
    const parameterOf = new Map([
      [paths.github.appPrivateKey, APP_1],
      [paths.githubAppPrivateKey(APP_2), APP_2],
    ]);
    ssm.on(GetParameterCommand).callsFake((input: { Name: string }) => {
      const app = parameterOf.get(input.Name);
      if (!app) throw new Error(`no parameter ${input.Name}`);
      return { Parameter: { Value: keys.get(app) } };
    });
    gh.setRateLimitRemaining('installation', 1000);
    gh.setRateLimitRemaining('app', 1000);
  });
  afterEach(() => ssm.reset());

  const providers = () => createCiProviders(config, { ssm: new SSMClient({ region: 'eu-west-1' }), metricSink: (line) => metricLines.push(line) }).github!;
  const job = (jobId: number): JobMessage => githubJob(jobId, ORG, 'linux');
  /** Installation-token requests from `from` on, by App. */
  const tokenCallsByApp = (from: number) => {
    const out: Record<string, number> = {};
    for (const r of gh.requests().slice(from)) if (r.credential === 'installation' && r.appId) out[r.appId] = (out[r.appId] ?? 0) + 1;
    return out;
  };

  it('with one App exhausted, registrations, look-ups, the sweep and deletions go through the other', async () => {
    const p = providers();
    const queued = gh.addJob(`${ORG}/app`, ['self-hosted', 'linux']);
    gh.setRateLimitRemaining('installation', 0, APP_1);
    const from = gh.requests().length;
    expect(await p.isJobQueued(job(queued.id))).toBe(true);
    expect(await p.resolveLabels!(job(queued.id))).toEqual(['self-hosted', 'linux']);
    const reg = await p.createRunner(job(queued.id), 'i-0123456789abcdef0', 'linux');
    expect((await p.listRunners()).map((r) => r.runnerId)).toContain(reg.runnerId);
    await p.deleteRunner(reg.runnerId);
    expect(gh.runners()).toEqual([]);
    // App 1 was tried once (refused 403, remaining 0) and then skipped until its reset.
    expect(tokenCallsByApp(from)).toEqual({ [APP_1]: 1, [APP_2]: 5 });
    expect(gh.requests().slice(from).filter((r) => r.appId === APP_1 && r.credential === 'installation')).toHaveLength(1);
  });

  it('spreads the calls over both Apps: each call takes the App with the most left', async () => {
    const p = providers();
    const queued = gh.addJob(`${ORG}/app`, ['self-hosted', 'linux']);
    const from = gh.requests().length;
    for (let i = 0; i < 10; i++) await p.isJobQueued(job(queued.id));
    const calls = tokenCallsByApp(from);
    expect(calls[APP_1]).toBe(5);
    expect(calls[APP_2]).toBe(5);
  });

  it('with both Apps exhausted, fails as a rate limit (403) and registers nothing', async () => {
    const p = providers();
    const queued = gh.addJob(`${ORG}/app`, ['self-hosted', 'linux']);
    gh.setRateLimitRemaining('installation', 0);
    const e = await p.createRunner(job(queued.id), 'i-0123456789abcdef0', 'linux').then(
      () => undefined,
      (err: unknown) => err,
    );
    expect(e).toBeInstanceOf(GitHubApiError);
    expect((e as GitHubApiError).status).toBe(403);
    expect((e as GitHubApiError).message).toMatch(/rate limit/i);
    expect(gh.runners()).toEqual([]);
    // Known exhausted now: the next call goes once to the App whose reset comes first, and fails the same way.
    const from = gh.requests().length;
    await expect(p.isJobQueued(job(queued.id))).rejects.toMatchObject({ status: 403 });
    expect(Object.values(tokenCallsByApp(from)).reduce((a, b) => a + b, 0)).toBe(1);
  });

  it('a 401 for one App reads only that App key again', async () => {
    const p = providers();
    const queued = gh.addJob(`${ORG}/app`, ['self-hosted', 'linux']);
    keys.set(APP_2, generateKeyPairSync('rsa', { modulusLength: 2048, privateKeyEncoding: { type: 'pkcs1', format: 'pem' }, publicKeyEncoding: { type: 'spki', format: 'pem' } }).privateKey);
    gh.setRateLimitRemaining('installation', 0, APP_1); // App 2 is the one with budget left
    await expect(p.isJobQueued(job(queued.id))).rejects.toMatchObject({ status: 401 });
    keys.set(APP_2, gh.apps[1]!.privateKeyPem); // the operator puts App 2's new key into SSM
    expect(await p.isJobQueued(job(queued.id))).toBe(true);
    const reads = ssm.commandCalls(GetParameterCommand).map((c) => c.args[0].input.Name);
    expect(reads.filter((n) => n === ssmPaths(PREFIX).githubAppPrivateKey(APP_2))).toHaveLength(2);
    expect(reads.filter((n) => n === ssmPaths(PREFIX).github.appPrivateKey)).toHaveLength(1);
  });

  it('publishes each App figures and the best fraction as EMF: once a minute while healthy, every answer when low', async () => {
    const p = providers();
    const queued = gh.addJob(`${ORG}/app`, ['self-hosted', 'linux']);
    for (let i = 0; i < 3; i++) await p.isJobQueued(job(queued.id));
    const records = () => metricLines.map((l) => JSON.parse(l) as Record<string, unknown>);
    const best = () => records().filter((r) => METRIC_NAMES.githubAppsBestRemainingFraction in r);
    expect(best()).toHaveLength(1); // the first answer's; the rest within the minute
    gh.setRateLimitRemaining('installation', 40, APP_1);
    gh.setRateLimitRemaining('installation', 30, APP_2);
    for (let i = 0; i < 3; i++) await p.isJobQueued(job(queued.id));
    const perApp = new Map(records().filter((r) => r.AppId !== undefined).map((r) => [r.AppId, r]));
    expect(perApp.get(APP_1)).toMatchObject({ [METRIC_NAMES.githubAppRateRemaining]: 38, [METRIC_NAMES.githubAppRateLimit]: 1000 });
    expect(perApp.get(APP_2)).toMatchObject({ [METRIC_NAMES.githubAppRateRemaining]: 29, [METRIC_NAMES.githubAppRateLimit]: 1000 });
    expect(best().at(-1)![METRIC_NAMES.githubAppsBestRemainingFraction]).toBeCloseTo(38 / 1000);
  });
});

describe('two GitHub Apps, two organisations and an enterprise against the loopback GitHub', () => {
  const PAT = 'ghp_enterprise-token-for-tests';
  const OTHER = 'globex';
  let gh: LoopbackGitHub;
  const ssm = mockClient(SSMClient);
  let metricLines: string[] = [];
  let notInstalled: string[] = [];
  /** App -> organisations (lower case) GitHub says it is not installed on: 404 to its installation look-up. */
  let missing: Record<string, string[]> = {};

  const placement = { provider: Provider.GITHUB, launchTemplateId: 'lt', launchTemplateVersion: '1', subnetIds: ['s'], instanceTypes: ['t3.micro'] };
  const fleet = (): FleetConfig =>
    buildFleetConfig({
      prefix: PREFIX,
      github: { appId: APP_1, additionalAppIds: [APP_2], organization: ORG, apiUrl: gh.url },
      pools: [
        { name: 'acme', labels: ['linux'], ...placement },
        { name: 'globex', labels: ['linux'], organization: OTHER, ...placement },
        { name: 'ent', labels: ['ent'], enterprise: 'umbrella', ...placement },
      ],
    });
  /** The App a JWT is of (its `iss` claim). */
  const appOfJwt = (auth: string) => (JSON.parse(Buffer.from(auth.split(' ')[1]!.split('.')[1]!, 'base64url').toString()) as { iss: string | number }).iss.toString();
  /** GitHub's answer for an App not installed on an organisation: 404 to `GET /orgs/{org}/installation`. */
  const fetchWithMissing: typeof fetch = async (input, init) => {
    const url = new URL(input instanceof Request ? input.url : String(input));
    const auth = new Headers(init?.headers).get('authorization') ?? '';
    const org = /^\/orgs\/([^/]+)\/installation$/.exec(url.pathname)?.[1]?.toLowerCase();
    if (org !== undefined && /^bearer /i.test(auth) && (missing[appOfJwt(auth)] ?? []).includes(org)) {
      return new Response(JSON.stringify({ message: 'Not Found' }), { status: 404, headers: { 'content-type': 'application/json' } });
    }
    return fetch(input, init);
  };
  const providers = (config = fleet()) =>
    createCiProviders(config, {
      ssm: new SSMClient({ region: 'eu-west-1' }),
      metricSink: (line) => metricLines.push(line),
      fetch: fetchWithMissing,
      logger: createLogger({ fn: 'test' }, (line) => void (/not installed/.test(line) && notInstalled.push(line))),
    }).github!;
  const job = githubJob;
  const requestsFrom = (from: number) => gh.requests().slice(from).map((r) => `${r.method} ${r.path} ${r.credential}${r.appId ? ` ${r.appId}` : ''}`);

  beforeAll(async () => {
    gh = await startLoopbackGitHub({ organization: ORG, organizations: [OTHER], enterprise: { slug: 'umbrella', token: PAT }, appId: APP_1, additionalAppIds: [APP_2], rateLimit: 1000 });
  });
  afterAll(async () => gh.close());
  beforeEach(() => {
    metricLines = [];
    notInstalled = [];
    missing = {};
    ssm.reset();
    const paths = ssmPaths(PREFIX);
    const values = new Map([
      [paths.github.appPrivateKey, gh.apps[0]!.privateKeyPem],
      [paths.githubAppPrivateKey(APP_2), gh.apps[1]!.privateKeyPem],
      [paths.githubEnterpriseToken, PAT],
    ]);
    ssm.on(GetParameterCommand).callsFake((input: { Name: string }) => ({ Parameter: { Value: values.get(input.Name) } }));
    gh.setRateLimitRemaining('installation', 1000);
    gh.setRateLimitRemaining('app', 1000);
    gh.setRateLimitRemaining('pat', 1000);
  });

  it("the enterprise PAT's answers are no App's figures, and a refused PAT is not tried again through the other App", async () => {
    const p = providers();
    gh.setRateLimitRemaining('pat', 5);
    await p.createRunner(job(1, ORG, 'ent'), 'i-0123456789abcdef0', 'ent');
    const perApp = metricLines.map((l) => JSON.parse(l) as Record<string, unknown>).filter((r) => r.AppId !== undefined);
    expect(perApp.filter((r) => (r[METRIC_NAMES.githubAppRateRemaining] as number) < 900)).toEqual([]);
    gh.setRateLimitRemaining('pat', 0);
    const from = gh.requests().length;
    await expect(p.createRunner(job(2, ORG, 'ent'), 'i-0123456789abcdef1', 'ent')).rejects.toMatchObject({ status: 403 });
    expect(requestsFrom(from)).toEqual(['POST /enterprises/umbrella/actions/runners/generate-jitconfig pat']);
  });

  it("deleting another organisation's runner spends that organisation's budget, chosen by the provider's own id parser", async () => {
    const p = providers();
    gh.setRateLimitRemaining('installation', 0, APP_1);
    const reg = await p.createRunner(job(3, OTHER, 'globex'), 'i-0123456789abcdef2', 'globex');
    expect(reg.runnerId).toMatch(/^globex\/\d+$/);
    const from = gh.requests().length;
    await p.deleteRunner(reg.runnerId);
    // App 1's globex installation is known exhausted: straight to App 2 (acme's budget, unknown, would have chosen App 1).
    expect(requestsFrom(from).filter((r) => r.includes(' installation '))).toEqual([`DELETE /orgs/globex/actions/runners/${reg.runnerId.split('/')[1]} installation ${APP_2}`]);
  });

  it('an App not installed on an organisation: the next App serves it, the App is remembered and logged, and the call is not repeated', async () => {
    missing = { [APP_1]: [OTHER] };
    const p = providers();
    const reg = await p.createRunner(job(4, OTHER, 'globex'), 'i-0123456789abcdef3', 'globex');
    expect(gh.runners().map((r) => r.id)).toContain(Number(reg.runnerId.split('/')[1]));
    expect(notInstalled).toEqual([expect.stringMatching(new RegExp(`not installed.*"appId":"${APP_1}".*"account":"${OTHER}"`))]);
    const from = gh.requests().length;
    await p.deleteRunner(reg.runnerId);
    expect(requestsFrom(from).every((r) => !r.endsWith(` ${APP_1}`))).toBe(true);
    expect(notInstalled).toHaveLength(1);
  });

  it('no App installed on an organisation: deleting its runner fails (the registration is not taken as gone), and a job of it is no "job gone"', async () => {
    missing = { [APP_1]: [OTHER], [APP_2]: [OTHER] };
    const p = providers();
    await expect(p.deleteRunner(`${OTHER}/77`)).rejects.toMatchObject({ status: 404, operation: 'look up installation' });
    const e = await p.isJobQueued(job(5, OTHER, 'globex')).catch((err: unknown) => err);
    expect(e).toBeInstanceOf(GitHubApiError);
    expect(e).toMatchObject({ status: 404, operation: 'look up installation' });
  });
});
