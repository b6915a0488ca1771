import { afterEach, describe, expect, it } from 'vitest';
import { GitHubProvider, GitLabProvider } from '../../lambdas/ci';
import { createReconcileHandler } from '../../lambdas/reconcile/handler';
import { AwsCaller } from '../../lambdas/shared/aws-call';
import { GitLabRunnerType, Provider, type FleetConfig, type JobMessage } from '../../lambdas/shared/contract';
import { startLoopbackGitHub, type LoopbackGitHub } from '../../local/ci/github-server';
import { startLoopbackGitLab, type LoopbackGitLab } from '../../local/ci/gitlab-server';
import { fleetConfig, Lines, PREFIX } from '../support/fixtures';
import { startLoopback, type Loopback } from '../support/loopback';
import { scaled } from '../support/slowdown';

/**
 * One provider's slowness must not starve the other: the reconciler against one loopback server
 * behind a proxy that delays every answer and the other at full speed (each way round), in one
 * run whose Lambda time runs out long before the slow provider's scan could finish.
 */
const ORG = 'acme';
const GROUP = 42;
const open: { close(): Promise<void> }[] = [];

afterEach(async () => {
  for (const s of open.splice(0)) await s.close();
});

/** An HTTP proxy to `target` that holds each request `delayMs` before forwarding it: a slow GitHub. */
async function delayingProxy(target: string, delayMs: number): Promise<Loopback> {
  return startLoopback(async (req) => {
    await new Promise((resolve) => setTimeout(resolve, delayMs));
    const headers = Object.fromEntries(Object.entries(req.headers).filter(([k, v]) => typeof v === 'string' && !['host', 'content-length', 'connection'].includes(k))) as Record<string, string>;
    const answer = await fetch(target + req.path, { method: req.method, headers, ...(req.body ? { body: req.body } : {}) });
    const out: Record<string, string> = {};
    answer.headers.forEach((v, k) => {
      if (!['content-length', 'transfer-encoding', 'connection', 'content-encoding'].includes(k)) out[k] = v;
    });
    return { status: answer.status, headers: out, body: await answer.text() };
  });
}

/** The fleet: GitHub's pool `linux` at the proxied GitHub, GitLab's pool `gl` at the loopback GitLab's group. */
function bothProviders(githubUrl: string, gh: LoopbackGitHub, gl: LoopbackGitLab): FleetConfig {
  const base = fleetConfig();
  const linux = base.pools[0]!;
  return {
    ...base,
    github: { ...base.github!, appId: gh.appId, organization: gh.organization, apiUrl: githubUrl },
    gitlab: { url: gl.url, runnerType: GitLabRunnerType.GROUP, scopeId: GROUP },
    pools: [linux, { ...linux, name: 'gl', provider: Provider.GITLAB, labels: ['gl-linux'] }],
  } as FleetConfig;
}

describe('reconciler with one slow provider', () => {
  it('GitLab reads its projects and queues their jobs in the same run while a slow GitHub runs into the deadline', { timeout: scaled(120_000) }, async () => {
    // 20 repositories with a queued job each: at `delayMs` a request, GitHub's scan needs more
    // than 40 requests: far more time than the run's `sliceMs` of time.
    const delayMs = scaled(200);
    const sliceMs = scaled(2_000);
    const repositories = Array.from({ length: 20 }, (_, i) => `${ORG}/repo-${i}`);
    const gh = await startLoopbackGitHub({ organization: ORG, repositories });
    open.push(gh);
    for (const r of repositories) gh.addJob(r, ['self-hosted', 'linux']);
    const proxy = await delayingProxy(gh.url, delayMs);
    open.push(proxy);
    const gl = await startLoopbackGitLab({ groupId: GROUP });
    open.push(gl);
    const pending = [gl.addJob(11, ['gl-linux']), gl.addJob(12, ['gl-linux'])];
    const config = bothProviders(proxy.url, gh, gl);

    const sent: JobMessage[] = [];
    const lines = new Lines();
    const github = new GitHubProvider({ prefix: PREFIX, github: config.github!, pools: config.pools, privateKey: async () => gh.privateKeyPem, sleep: async () => {} });
    const gitlab = new GitLabProvider({ prefix: PREFIX, gitlab: config.gitlab!, pools: config.pools, token: async () => gl.accessToken, sleep: async () => {} });
    const margin = 40_000;
    const deadline = Date.now() + margin + sliceMs;
    const report = await createReconcileHandler({
      sqs: { send: async (c: { input: { MessageBody: string } }) => void sent.push(JSON.parse(c.input.MessageBody) as JobMessage) } as never,
      aws: new AwsCaller({ sleep: async () => {}, baseDelayMs: 1 }),
      loadConfig: async () => config,
      providers: () => ({ github, gitlab }),
      queueUrl: 'https://sqs.local/jobs.fifo',
      sink: lines.sink,
      options: { deadlineMarginMs: margin, github: { minQueuedSeconds: 0 }, gitlab: { minQueuedSeconds: 0 } },
    })({}, { getRemainingTimeInMillis: () => deadline - Date.now() });

    // GitHub was cut at the deadline, part way through its repositories.
    const byProvider = new Map(lines.logs('reconciled').map((l) => [l.provider, l]));
    expect(byProvider.get(Provider.GITHUB)).toMatchObject({ stoppedAt: 'deadline' });
    expect(report.stoppedAt).toBe('deadline');
    // GitLab read both projects' pending jobs and queued both jobs, in the same run.
    const jobLists = gl.requests().filter((r) => /\/projects\/\d+\/jobs/.test(r.path));
    expect(new Set(jobLists.map((r) => /\/projects\/(\d+)\/jobs/.exec(r.path)?.[1]))).toEqual(new Set(['11', '12']));
    expect(byProvider.get(Provider.GITLAB)).toMatchObject({ stoppedAt: null, queued: 2 });
    expect(sent.filter((m) => m.provider === Provider.GITLAB).map((m) => m.providerJobId).sort()).toEqual(pending.map((j) => String(j.id)).sort());
  });

  // The other way round: run one after the other with GitLab first, the test above passes; this one does not.
  it('GitHub reads its repositories and queues their jobs in the same run while a slow GitLab runs into the deadline', { timeout: scaled(120_000) }, async () => {
    // 40 projects with a pending job each: at `delayMs` a request, GitLab's scan needs more than 40 requests.
    const delayMs = scaled(200);
    const sliceMs = scaled(2_000);
    const repositories = [`${ORG}/repo-a`, `${ORG}/repo-b`];
    const gh = await startLoopbackGitHub({ organization: ORG, repositories });
    open.push(gh);
    const queuedJobs = repositories.map((r) => gh.addJob(r, ['self-hosted', 'linux']));
    const gl = await startLoopbackGitLab({ groupId: GROUP });
    open.push(gl);
    for (let p = 100; p < 140; p++) gl.addJob(p, ['gl-linux']);
    const proxy = await delayingProxy(gl.url, delayMs);
    open.push(proxy);
    const config = bothProviders(gh.url, gh, gl);
    const slowConfig = { ...config, gitlab: { ...config.gitlab!, url: proxy.url } } as FleetConfig;

    const sent: JobMessage[] = [];
    const lines = new Lines();
    const github = new GitHubProvider({ prefix: PREFIX, github: slowConfig.github!, pools: slowConfig.pools, privateKey: async () => gh.privateKeyPem, sleep: async () => {} });
    const gitlab = new GitLabProvider({ prefix: PREFIX, gitlab: slowConfig.gitlab!, pools: slowConfig.pools, token: async () => gl.accessToken, sleep: async () => {} });
    const margin = 40_000;
    const deadline = Date.now() + margin + sliceMs;
    await createReconcileHandler({
      sqs: { send: async (c: { input: { MessageBody: string } }) => void sent.push(JSON.parse(c.input.MessageBody) as JobMessage) } as never,
      aws: new AwsCaller({ sleep: async () => {}, baseDelayMs: 1 }),
      loadConfig: async () => slowConfig,
      providers: () => ({ github, gitlab }),
      queueUrl: 'https://sqs.local/jobs.fifo',
      sink: lines.sink,
      options: { deadlineMarginMs: margin, github: { minQueuedSeconds: 0 }, gitlab: { minQueuedSeconds: 0 } },
    })({}, { getRemainingTimeInMillis: () => deadline - Date.now() });

    const byProvider = new Map(lines.logs('reconciled').map((l) => [l.provider, l]));
    expect(byProvider.get(Provider.GITLAB)).toMatchObject({ stoppedAt: 'deadline' });
    expect(byProvider.get(Provider.GITHUB)).toMatchObject({ stoppedAt: null, queued: 2 });
    expect(sent.filter((m) => m.provider === Provider.GITHUB).map((m) => m.providerJobId).sort()).toEqual(queuedJobs.map((j) => String(j.id)).sort());
  });
});
