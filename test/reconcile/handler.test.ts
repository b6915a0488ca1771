import type { SQSClient } from '@aws-sdk/client-sqs';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { GitHubAnswer, GitHubAnswerObserver } from '../../lambdas/ci/github';
import { createReconcileHandler } from '../../lambdas/reconcile/handler';
import { AwsCaller } from '../../lambdas/shared/aws-call';
import { buildFleetConfig, LAMBDA_ENV, LEDGER_MESSAGE, METRIC_NAMES, Provider, type CiProvider, type FleetConfig } from '../../lambdas/shared/contract';
import { checkGitHubQuery } from '../../local/ci/github-bounds';
import { fleetConfig, Lines } from '../support/fixtures';

const old = new Date(Date.now() - 10 * 60_000).toISOString();

/** The routes the reconciler may ask for (lambdas/reconcile/github.ts), as octokit route templates. */
const RECONCILE_ROUTES = [
  'GET /app/hook/deliveries',
  'POST /app/hook/deliveries/{delivery_id}/attempts',
  'GET /installation/repositories',
  'GET /repos/{owner}/{repo}/actions/runs',
  'GET /repos/{owner}/{repo}/actions/runs/{run_id}/jobs',
];

/**
 * The request as GitHub gets it (octokit: the route's `{names}` from `params`, a GET's other
 * params as its query), checked against GitHub's published bounds (local/ci/github-bounds.ts):
 * a route the reconciler does not use, or a query GitHub refuses, fails the test.
 */
function checkedRequest(route: string, params: Record<string, unknown> = {}): void {
  if (!RECONCILE_ROUTES.includes(route)) throw new Error(`fake GitHub: the reconciler asked for ${route}, which it does not use`);
  const [method, template] = route.split(' ') as [string, string];
  const rest = new Map(Object.entries(params));
  const path = template.replace(/\{(\w+)\}/g, (_, name: string) => {
    if (!rest.has(name)) throw new Error(`fake GitHub: ${route} without ${name}`);
    const value = String(rest.get(name));
    rest.delete(name);
    return encodeURIComponent(value);
  });
  const query = new URLSearchParams(method === 'GET' ? [...rest].map(([k, v]): [string, string] => [k, String(v)]) : []);
  const checked = checkGitHubQuery(method, path, query);
  if ('refusal' in checked) throw new Error(`fake GitHub: GitHub refuses ${method} ${path}?${query}: ${JSON.stringify(checked.refusal.body)}`);
}

/** A GitHub that lists one repository with one queued run holding one queued job for pool "linux". */
function fakeGitHub(): CiProvider & {
  appRequest: (op?: string, route?: string, params?: Record<string, unknown>) => Promise<GitHubAnswer>;
  installationRequest: (op: string, route: string, params?: Record<string, unknown>) => Promise<GitHubAnswer>;
} {
  const answer = (data: unknown): GitHubAnswer => ({ status: 200, data, headers: { 'x-ratelimit-limit': '5000', 'x-ratelimit-remaining': '4000' } });
  return {
    provider: Provider.GITHUB,
    createRunner: async () => Promise.reject(new Error('unused')),
    deleteRunner: async () => undefined,
    listRunners: async () => [],
    isJobQueued: async () => true,
    appRequest: async (_op, route = 'GET /app/hook/deliveries', params = { per_page: 100 }) => {
      checkedRequest(route, params);
      return answer([]);
    },
    installationRequest: async (_op, route, params) => {
      checkedRequest(route, params);
      if (route === 'GET /installation/repositories') return answer({ repositories: [{ full_name: 'acme/app' }] });
      if (route.endsWith('/actions/runs')) return answer({ workflow_runs: [{ id: 5 }] });
      return answer({ jobs: [{ id: 77, status: 'queued', labels: ['linux'], created_at: old }] });
    },
  };
}

function run(config: FleetConfig, sqs: Pick<SQSClient, 'send'>, lines: Lines) {
  return createReconcileHandler({
    sqs: sqs as SQSClient,
    aws: new AwsCaller({ sleep: async () => {}, baseDelayMs: 1 }),
    loadConfig: async () => config,
    providers: () => ({ github: fakeGitHub() }),
    queueUrl: 'https://sqs.local/jobs.fifo',
    sink: lines.sink,
  })();
}

describe('reconcile handler', () => {
  afterEach(() => {
    vi.unstubAllEnvs();
    vi.resetModules();
  });

  it('does nothing for a fleet whose providers offer no reconcile API', async () => {
    const send = vi.fn();
    const gitlabOnly = buildFleetConfig({
      gitlab: { url: 'https://gitlab.example.com' },
      pools: [{ name: 'gl', provider: Provider.GITLAB, labels: ['linux'], launchTemplateId: 'lt-0', launchTemplateVersion: '1', subnetIds: ['subnet-1'], instanceTypes: ['t3.micro'] }],
    });
    expect(await run(gitlabOnly, { send }, new Lines())).toEqual({ redelivered: 0, queued: 0, requests: 0 });
    expect(send).not.toHaveBeenCalled();
  });

  it('sends a found job with its group and deduplication id, and counts only what the queue took', async () => {
    const lines = new Lines();
    const sent: Record<string, unknown>[] = [];
    const ok = await run(fleetConfig(), { send: async (c: { input: Record<string, unknown> }) => void sent.push(c.input) } as never, lines);
    expect(ok).toMatchObject({ queued: 1 });
    expect(sent[0]).toMatchObject({ MessageGroupId: 'github:77', MessageDeduplicationId: 'github:reconciler-github-77' });
    expect(lines.metric('JobsReconciled', { Pool: 'linux' })).toBe(1);

    const failing = new Lines();
    const refused = Object.assign(new Error('denied'), { name: 'AccessDenied', $metadata: { httpStatusCode: 403 } });
    expect(await run(fleetConfig(), { send: async () => Promise.reject(refused) } as never, failing)).toMatchObject({ queued: 0 });
    expect(failing.metric('JobsReconciled')).toBe(0);
    expect(failing.logs('queueing a reconciled job failed')[0]).toMatchObject({ error: 'AccessDenied', jobId: 'github:77' });
  });

  it("stamps no ledger line for a found job: it queues a waiting job again at every run, so scale-up stamps its intake, once per job", async () => {
    const now = new Date(Date.parse(old) + 600_000);
    const lines = new Lines();
    const reconcile = createReconcileHandler({ sqs: { send: async () => ({}) } as never, aws: new AwsCaller({ sleep: async () => {}, baseDelayMs: 1 }), loadConfig: async () => fleetConfig(), providers: () => ({ github: fakeGitHub() }), queueUrl: 'https://sqs.local/jobs.fifo', sink: lines.sink, now: () => now });
    expect(await reconcile()).toMatchObject({ queued: 1 });
    expect(await reconcile()).toMatchObject({ queued: 1 });
    expect(lines.logs(LEDGER_MESSAGE)).toEqual([]);
    expect(lines.metric(METRIC_NAMES.jobStageSeconds)).toBe(0);
  });

  it('stops starting requests at the deadline margin and keeps what it queued per repository', async () => {
    // Three repositories, each with one queued job; the Lambda's time runs out while the second is read.
    const events: string[] = [];
    const at = new Date(Math.floor(Date.now() / 900_000) * 900_000); // a run number divisible by 3: the window starts at acme/a
    let remainingMs = 100_000;
    const answer = (data: unknown): GitHubAnswer => ({ status: 200, data, headers: {} });
    const github = {
      ...fakeGitHub(),
      installationRequest: async (_op: string, route: string, params: Record<string, unknown>) => {
        checkedRequest(route, params);
        if (route.startsWith('GET /installation/repositories')) return answer({ repositories: ['a', 'b', 'c'].map((r) => ({ full_name: `acme/${r}` })) });
        events.push(`${route.split(' ')[1]!.endsWith('/jobs') ? 'jobs' : 'runs'} ${String(params.repo)}`);
        if (params.repo === 'b' && route.endsWith('/actions/runs')) remainingMs = 30_000; // below the 40 s margin from now on
        if (route.endsWith('/actions/runs')) return answer({ workflow_runs: [{ id: params.repo === 'a' ? 1 : 2 }] });
        return answer({ jobs: [{ id: params.run_id === 1 ? 71 : 72, status: 'queued', labels: ['linux'], created_at: new Date(at.getTime() - 10 * 60_000).toISOString() }] });
      },
    };
    const lines = new Lines();
    const send = async (command: { input: { MessageGroupId: string } }) => void events.push(`queue ${command.input.MessageGroupId}`);
    const report = await createReconcileHandler({
      sqs: { send } as never,
      aws: new AwsCaller({ sleep: async () => {}, baseDelayMs: 1 }),
      loadConfig: async () => fleetConfig(),
      providers: () => ({ github }),
      queueUrl: 'https://sqs.local/jobs.fifo',
      now: () => at,
      sink: lines.sink,
    })({}, { getRemainingTimeInMillis: () => remainingMs });
    expect(report).toMatchObject({ queued: 1, stoppedAt: 'deadline' });
    // acme/a's job is queued before acme/b is read; acme/b's second list and acme/c are never asked for.
    expect(events).toEqual(['runs a', 'runs a', 'jobs a', 'queue github:71', 'runs b']);
    expect(lines.logs('reconciler stopped before its Lambda timeout; the next run goes on')).toHaveLength(1);
    expect(lines.metric('JobsReconciled', { Pool: 'linux' })).toBe(1);
  });

  it('reads a run listed as both queued and in progress once, and publishes its metrics when a step fails', async () => {
    const lines = new Lines();
    const github = fakeGitHub();
    const calls: string[] = [];
    const failing = {
      ...github,
      // Reports its rate-limit headers as the provider does, so the run has something to publish.
      appRequest: async (op: string, route: string, params: Record<string, unknown>, _retry: boolean, observe?: GitHubAnswerObserver) => {
        const a = await github.appRequest(op, route, params);
        observe?.('app', a.headers);
        return a;
      },
      installationRequest: async (op: string, route: string, params: Record<string, unknown>) => {
        calls.push(route);
        if (route.startsWith('GET /installation/repositories') && calls.length > 4) throw new Error('GitHub answered 502');
        return github.installationRequest(op, route, params);
      },
    };
    const handler = createReconcileHandler({
      sqs: { send: async () => ({}) } as never,
      aws: new AwsCaller({ sleep: async () => {}, baseDelayMs: 1 }),
      loadConfig: async () => fleetConfig(),
      providers: () => ({ github: failing }),
      queueUrl: 'https://sqs.local/jobs.fifo',
      sink: lines.sink,
    });
    expect(await handler()).toMatchObject({ queued: 1 });
    // The fake lists run 5 under both statuses: its jobs are read once.
    expect(calls.filter((r) => r.endsWith('/jobs'))).toHaveLength(1);

    // The second run's repository list fails: logged, and the rate limit seen is still published.
    const before = lines.json().filter((l) => l._aws && l.Credential === 'github-app').length;
    expect(await handler()).toMatchObject({ queued: 0 });
    expect(lines.logs('a reconciler step failed; going on')[0]).toMatchObject({ step: 'find queued jobs', error: 'GitHub answered 502' });
    expect(lines.json().filter((l) => l._aws && l.Credential === 'github-app').length).toBe(before + 1);
  });

  it("the fake GitHub checks each request against GitHub's published bounds and the reconciler's routes", async () => {
    const github = fakeGitHub();
    const runs = 'GET /repos/{owner}/{repo}/actions/runs';
    await expect(github.installationRequest('list runs', runs, { owner: 'acme', repo: 'app', status: 'queued', per_page: 100 })).resolves.toMatchObject({ status: 200 });
    await expect(github.installationRequest('list runs', runs, { owner: 'acme', repo: 'app', status: 'busy' })).rejects.toThrow(/GitHub refuses GET \/repos\/acme\/app\/actions\/runs\?status=busy/);
    await expect(github.installationRequest('list jobs', 'GET /repos/{owner}/{repo}/actions/runs/{run_id}/jobs', { owner: 'acme', repo: 'app', run_id: 5, filter: 'queued' })).rejects.toThrow(/GitHub refuses/);
    await expect(github.appRequest('list deliveries', 'GET /app/hook/deliveries', { status: 'pending' })).rejects.toThrow(/GitHub refuses/);
    await expect(github.installationRequest('list runs', 'GET /repos/{owner}/{repo}/actions/runs', { owner: 'acme' })).rejects.toThrow(/without repo/);
    await expect(github.installationRequest('list', 'GET /orgs/{org}/repos', { org: 'acme' })).rejects.toThrow(/does not use/);
  });

  it('fails at load with the variable named when RECONCILE_OPTIONS is not JSON', async () => {
    vi.stubEnv('AWS_REGION', 'us-east-1');
    vi.stubEnv(LAMBDA_ENV.jobsQueueUrl, 'https://sqs.local/jobs.fifo');
    vi.stubEnv(LAMBDA_ENV.reconcileOptions, '{not json');
    await expect(import('../../lambdas/reconcile/index.js')).rejects.toThrow(/RECONCILE_OPTIONS is not JSON/);
    vi.resetModules();
    vi.stubEnv(LAMBDA_ENV.reconcileOptions, JSON.stringify({ github: { redeliverLimit: 3 } }));
    expect(typeof (await import('../../lambdas/reconcile/index.js')).handler).toBe('function');
  });
});
