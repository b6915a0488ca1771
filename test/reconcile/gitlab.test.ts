import type { SQSClient } from '@aws-sdk/client-sqs';
import { afterEach, describe, expect, it } from 'vitest';
import { GitLabProvider } from '../../lambdas/ci';
import { parseDeliveries } from '../../lambdas/reconcile/redeliveries';
import { reconcileGitLab, GITLAB_RECONCILE_DEFAULTS, pendingMessages, projectPath, type GitLabReconcileOptions } from '../../lambdas/reconcile/gitlab';
import { createReconcileHandler } from '../../lambdas/reconcile/handler';
import { chooseResends, parseHookEvents, type ListedHookEvent } from '../../lambdas/reconcile/hook-events';
import { RateBudget } from '../../lambdas/reconcile/rate-budget';
import { AwsCaller } from '../../lambdas/shared/aws-call';
import { buildFleetConfig, GitLabRunnerType, LabelMatch, Provider, type FleetConfig, type JobMessage } from '../../lambdas/shared/contract';
import { createLogger } from '../../lambdas/shared/log';
import { startLoopbackGitLab, type LoopbackGitLab } from '../../local/ci/gitlab-server';
import { Lines, PREFIX } from '../support/fixtures';

const GROUP = 42;
const LATER = () => new Date(Date.now() + 10 * 60_000);

function config(gl: LoopbackGitLab, gitlab: Partial<NonNullable<Parameters<typeof buildFleetConfig>[0]['gitlab']>> = {}): FleetConfig {
  return buildFleetConfig({
    prefix: PREFIX,
    gitlab: { url: gl.url, runnerType: GitLabRunnerType.GROUP, scopeId: GROUP, webhookId: 1, ...gitlab },
    pools: [{ name: 'linux', provider: Provider.GITLAB, labels: ['linux'], launchTemplateId: 'lt-0', launchTemplateVersion: '1', subnetIds: ['subnet-1'], instanceTypes: ['t3.micro'] }],
  });
}

function provider(gl: LoopbackGitLab, c: FleetConfig): GitLabProvider {
  return new GitLabProvider({ prefix: PREFIX, gitlab: c.gitlab!, pools: c.pools, token: async () => gl.accessToken, sleep: async () => {} });
}

async function run(gl: LoopbackGitLab, c: FleetConfig, options: Partial<GitLabReconcileOptions> = {}, lines = new Lines()) {
  const found: JobMessage[] = [];
  const result = await reconcileGitLab({
    api: provider(gl, c),
    gitlab: c.gitlab!,
    pools: c.pools,
    budget: new RateBudget(0.2, 100),
    options: { ...GITLAB_RECONCILE_DEFAULTS, ...options },
    now: LATER,
    log: createLogger({ fn: 'test' }, lines.sink),
    outOfTime: () => false,
    onFound: async (m) => void found.push(...m),
  });
  return { result, found };
}

const event = (id: number, key: string, status: number, pendingJob = true): ListedHookEvent => ({ id, key, status, pendingJob });

describe('chooseResends', () => {
  it('resends the newest attempt of each pending-job delivery that never got a 2xx, newest first, up to the limit', () => {
    const events = [event(1, 'a', 500), event(2, 'b', 0), event(3, 'a', 502), event(4, 'c', 500), event(5, 'c', 200), event(6, 'd', 500, false), event(7, 'e', 404)];
    expect(chooseResends(events, { limit: 10, maxAttempts: 3 })).toEqual({ resend: [7, 3, 2], givenUp: [], deferred: 0 });
    expect(chooseResends(events, { limit: 2, maxAttempts: 3 })).toEqual({ resend: [7, 3], givenUp: [], deferred: 1 });
  });

  it('gives a delivery up after maxAttempts failed attempts, the first included', () => {
    const events = [event(1, 'a', 500), event(2, 'a', 500), event(3, 'a', 500), event(4, 'b', 500)];
    expect(chooseResends(events, { limit: 10, maxAttempts: 3 })).toEqual({ resend: [4], givenUp: ['a'], deferred: 0 });
  });

  it('parses GitLab\'s entries: "internal error" is no answer, the Idempotency-Key groups attempts, only pending Job Hooks count', () => {
    const parsed = parseHookEvents([
      { id: 9, trigger: 'job_hooks', request_headers: { 'Idempotency-Key': 'k1' }, request_data: { object_kind: 'build', build_status: 'pending' }, response_status: 'internal error' },
      { id: 10, trigger: 'job_hooks', request_headers: {}, request_data: JSON.stringify({ object_kind: 'build', build_status: 'running' }), response_status: '200' },
      { id: 11, trigger: 'push_hooks', request_headers: { 'idempotency-key': 'k2' }, request_data: { object_kind: 'push' }, response_status: '500' },
      { trigger: 'job_hooks' },
    ]);
    expect(parsed).toEqual([event(9, 'k1', 0), event(10, 'event-10', 200, false), event(11, 'k2', 500, false)]);
    expect(() => parseHookEvents({})).toThrow(/not a list/);
    // The GitHub parser is unrelated: a GitLab list is not a delivery list.
    expect(parseDeliveries([{ id: 9 }])).toEqual([]);
  });

  it('queues only pending jobs that waited minQueuedSeconds (queued_duration first) and whose tags match a pool', () => {
    const c = buildFleetConfig({
      gitlab: { url: 'https://gl.example' },
      pools: [{ name: 'linux', provider: Provider.GITLAB, labels: ['linux'], launchTemplateId: 'lt-0', launchTemplateVersion: '1', subnetIds: ['subnet-1'], instanceTypes: ['t3.micro'] }],
    });
    const now = new Date('2026-12-02T05:00:00Z');
    const deps = { pools: c.pools, gitlab: c.gitlab!, options: GITLAB_RECONCILE_DEFAULTS, now: () => now };
    const jobs = [
      { id: 1, status: 'pending', tag_list: ['linux'], queued_duration: 300, web_url: 'https://gl.example/g/p/-/jobs/1' },
      { id: 2, status: 'running', tag_list: ['linux'], queued_duration: 300 },
      { id: 3, status: 'pending', tag_list: ['gpu'], queued_duration: 300 },
      { id: 4, status: 'pending', tag_list: ['linux'], queued_duration: 30, created_at: '2026-12-01T00:00:00Z' },
      { id: 5, status: 'pending', tag_list: ['linux'], created_at: '2026-12-02T04:50:00Z' },
    ];
    expect(pendingMessages(deps, 9, jobs).map((m) => [m.providerJobId, m.owner, m.project, m.traceId === m.deliveryId || m.traceId.startsWith('gitlab-')])).toEqual([
      ['1', 'g', 'p', true],
      ['5', 'projects', 'project-9', true],
    ]);
    // The job's creation time is carried in the message, as the webhook carries build_created_at; none given, none carried.
    expect(pendingMessages(deps, 9, jobs).map((m) => m.createdAt)).toEqual([undefined, '2026-12-02T04:50:00.000Z']);
  });

  it("leaves a paused pool's pending jobs at GitLab, counted as paused, and queues them once it resumes", () => {
    const pools = (maxRunners: number) =>
      buildFleetConfig({
        gitlab: { url: 'https://gl.example' },
        pools: [
          { name: 'linux', provider: Provider.GITLAB, labels: ['linux'], maxRunners, launchTemplateId: 'lt-0', launchTemplateVersion: '1', subnetIds: ['subnet-1'], instanceTypes: ['t3.micro'] },
          { name: 'gpu', provider: Provider.GITLAB, labels: ['gpu'], launchTemplateId: 'lt-0', launchTemplateVersion: '1', subnetIds: ['subnet-1'], instanceTypes: ['t3.micro'] },
        ],
      });
    const jobs = [
      { id: 1, status: 'pending', tag_list: ['linux'], queued_duration: 7200 },
      { id: 2, status: 'pending', tag_list: ['gpu'], queued_duration: 300 },
    ];
    const deps = (c: FleetConfig) => ({ pools: c.pools, gitlab: c.gitlab!, options: GITLAB_RECONCILE_DEFAULTS, now: () => new Date('2026-12-02T05:00:00Z') });
    const skipped = { paused: 0 };
    expect(pendingMessages(deps(pools(0)), 9, jobs, skipped).map((m) => [m.providerJobId, m.pool])).toEqual([['2', 'gpu']]);
    expect(skipped).toEqual({ paused: 1 });
    // Resumed: the job GitLab kept pending (two hours, past a queued copy's maximum wait) is served.
    expect(pendingMessages(deps(pools(3)), 9, jobs).map((m) => [m.providerJobId, m.pool])).toEqual([['1', 'linux'], ['2', 'gpu']]);
  });

  it('names the project from the job\'s web_url, else from its id', () => {
    expect(projectPath('https://gl.example/', 'https://gl.example/a/b/c/-/jobs/9', 5)).toEqual({ owner: 'a/b', project: 'c' });
    expect(projectPath('https://gl.example', 'https://other/a/c/-/jobs/9', 5)).toEqual({ owner: 'projects', project: 'project-5' });
  });
});

describe('reconcileGitLab against the loopback GitLab', () => {
  let gl: LoopbackGitLab | undefined;
  afterEach(async () => gl?.close());

  it('resends the failed hook event and queues every pending matching job of the group\'s projects, with a reconciler trace', async () => {
    const resent: string[] = [];
    gl = await startLoopbackGitLab({ groupId: GROUP, projectIds: [13], resend: async ({ idempotencyKey }) => (resent.push(idempotencyKey), 200) });
    const delivered = gl.addJob(11, ['linux']);
    const failed = gl.addJob(12, ['linux']);
    const neverSent = gl.addJob(12, ['linux']);
    gl.addJob(11, ['gpu']);
    gl.recordHookEvent(delivered.id, 200);
    const failedKey = gl.recordHookEvent(failed.id, 502);
    const c = config(gl);
    const { result, found } = await run(gl, c);
    expect(result).toMatchObject({ resent: 1, found: 3, errors: 0 });
    expect(resent).toEqual([failedKey]);
    // The resend is logged as an attempt of its own with the original's key, and succeeded.
    expect(gl.hookEvents()[0]).toMatchObject({ response_status: '200', request_headers: { 'Idempotency-Key': failedKey } });
    expect(found.map((m) => m.providerJobId).sort()).toEqual([delivered.id, failed.id, neverSent.id].map(String).sort());
    expect(found.find((m) => m.providerJobId === String(neverSent.id))).toMatchObject({
      jobId: `gitlab:${neverSent.id}`,
      pool: 'linux',
      projectId: 12,
      owner: `group-${GROUP}`,
      project: 'project-12',
      labelsResolved: true,
      deliveryId: `reconciler-gitlab-${neverSent.id}`,
    });
    // A second run: the resent event now has a 2xx attempt, nothing is resent again.
    expect((await run(gl, c)).result).toMatchObject({ resent: 0, found: 3 });
  });

  it('lists the hook events 20 a page, as GitLab allows (it refuses per_page 21 with a 400), and resends a failed event on the third page', async () => {
    const resent: string[] = [];
    gl = await startLoopbackGitLab({ groupId: GROUP, resend: async ({ idempotencyKey }) => (resent.push(idempotencyKey), 200) });
    // The oldest event failed; 44 delivered ones after it push it to the third page of 20.
    const failedKey = gl.recordHookEvent(gl.addJob(11, ['linux']).id, 500);
    for (let i = 0; i < 44; i++) gl.recordHookEvent(gl.addJob(11, ['linux']).id, 200);
    const c = config(gl);
    const refused = await fetch(`${gl.url}/api/v4/groups/${GROUP}/hooks/1/events?per_page=21`, { headers: { 'private-token': gl.accessToken } });
    expect([refused.status, await refused.json()]).toEqual([400, { error: 'per_page does not have a valid value' }]);
    const probes = gl.requests().length;
    const { result } = await run(gl, c, { projectsPerRun: 0 });
    expect(result).toMatchObject({ resent: 1, errors: 0 });
    expect(resent).toEqual([failedKey]);
    expect(gl.requests().slice(probes).filter((r) => r.path.endsWith('/hooks/1/events'))).toHaveLength(3);
  });

  it('leaves a job younger than minQueuedSeconds to its Job Hook', async () => {
    gl = await startLoopbackGitLab({ groupId: GROUP });
    gl.addJob(11, ['linux']);
    const c = config(gl);
    const found: JobMessage[] = [];
    await reconcileGitLab({
      api: provider(gl, c), gitlab: c.gitlab!, pools: c.pools, budget: new RateBudget(0.2, 100), options: GITLAB_RECONCILE_DEFAULTS,
      now: () => new Date(), log: createLogger({ fn: 'test' }, new Lines().sink), outOfTime: () => false, onFound: async (m) => void found.push(...m),
    });
    expect(found).toEqual([]);
  });

  it('resends at most 5 a run (GitLab refuses a sixth within the minute) and leaves the rest for the next run', async () => {
    gl = await startLoopbackGitLab({ groupId: GROUP, resend: async () => 200 });
    for (let i = 0; i < 7; i++) gl.recordHookEvent(gl.addJob(11, ['linux']).id, 500);
    const c = config(gl);
    const lines = new Lines();
    const { result } = await run(gl, c, { resendLimit: 10 }, lines);
    expect(result).toMatchObject({ resent: 5, errors: 0 });
    expect(lines.logs('failed hook events resent')[0]).toMatchObject({ resent: 5, deferred: 2 });
    expect(gl.requests().filter((r) => r.path.endsWith('/resend'))).toHaveLength(5);
  });

  it('its requests stay within the stated budget: 1 + E + min(limit, 5) + ceil(N/100) + min(N, cap) * J', async () => {
    gl = await startLoopbackGitLab({ groupId: GROUP, projectIds: Array.from({ length: 130 }, (_, i) => 100 + i), resend: async () => 200 });
    for (let i = 0; i < 3; i++) gl.recordHookEvent(gl.addJob(100 + i, ['linux']).id, 500);
    // One project with 150 pending jobs: two pages of 100.
    for (let i = 0; i < 150; i++) gl.addJob(101, ['linux']);
    const c = config(gl);
    const cap = 40;
    const { result } = await run(gl, c, { projectsPerRun: cap, resendLimit: 3 });
    const served = gl.requests();
    expect(result.requests).toBe(served.length);
    const hookReads = served.filter((r) => /\/hooks\/1(\/events)?$/.test(r.path)).length; // the hook and one page of events
    const resends = served.filter((r) => r.path.endsWith('/resend')).length;
    const projectPages = served.filter((r) => r.path === `/groups/${GROUP}/projects`).length;
    const jobPages = served.filter((r) => /^\/projects\/\d+\/jobs$/.test(r.path)).length;
    expect([hookReads, resends, projectPages]).toEqual([2, 3, 2]);
    // The window holds cap projects; one of them (101) needs two pages when it falls in the window.
    expect(jobPages === cap || jobPages === cap + 1).toBe(true);
    const { hookEventPages, jobPagesPerProject } = GITLAB_RECONCILE_DEFAULTS;
    expect(served.length).toBeLessThanOrEqual(1 + hookEventPages + 3 + Math.ceil(130 / 100) + Math.min(130, cap) * jobPagesPerProject);
  });

  it('covers every pool scope once: both groups\' hooks resent from, both groups\' and the project\'s pending jobs found, each matched to a pool that can serve it; a group it cannot read is skipped', async () => {
    const resent: string[] = [];
    const OTHER = 43;
    gl = await startLoopbackGitLab({
      groupId: GROUP,
      groups: [{ id: OTHER, projectIds: [21] }],
      forbidden: { groupIds: [44] },
      moreHooks: [{ owner: 'group', ownerId: OTHER, hookId: 2 }],
      resend: async ({ idempotencyKey }) => (resent.push(idempotencyKey), 200),
    });
    const home = gl.addJob(11, ['linux']);
    const other = gl.addJob(21, ['linux', 'other']);
    // Tagged for the project pool, but of another project: no pool can serve it.
    gl.addJob(11, ['app']);
    const app = gl.addJob(30, ['app']);
    const keys = [gl.recordHookEvent(home.id, 502), gl.recordHookEvent(other.id, 502)];
    const pool = { launchTemplateId: 'lt-0', launchTemplateVersion: '1', subnetIds: ['subnet-1'], instanceTypes: ['t3.micro'] };
    const c = buildFleetConfig({
      prefix: PREFIX,
      gitlab: { url: gl.url, runnerType: GitLabRunnerType.GROUP, scopeId: GROUP, webhookId: 1 },
      pools: [
        { name: 'home', provider: Provider.GITLAB, labels: ['linux'], ...pool },
        { name: 'home-big', provider: Provider.GITLAB, labels: ['linux', 'big'], labelMatch: LabelMatch.SUBSET, ...pool },
        { name: 'other', provider: Provider.GITLAB, labels: ['linux', 'other'], gitlabGroupId: OTHER, gitlabWebhookId: 2, ...pool },
        { name: 'app', provider: Provider.GITLAB, labels: ['app'], gitlabProjectId: 30, ...pool },
        { name: 'foreign', provider: Provider.GITLAB, labels: ['foreign'], gitlabGroupId: 44, ...pool },
      ],
    });
    const lines = new Lines();
    const { result, found } = await run(gl, c, {}, lines);
    expect(resent.sort()).toEqual([...keys].sort());
    expect(result).toMatchObject({ resent: 2, errors: 1 });
    expect(lines.logs("listing a group's projects failed; scanning the other scopes")[0]).toMatchObject({ groupId: 44 });
    expect(Object.fromEntries(found.map((m) => [m.providerJobId, m.pool]))).toEqual({ [home.id]: 'home', [other.id]: 'other', [app.id]: 'app' });
    // Each group's projects listed once, though two pools share group 42.
    expect(gl.requests().filter((r) => r.path === `/groups/${GROUP}/projects`)).toHaveLength(1);
    expect(gl.requests().filter((r) => r.path === `/groups/${OTHER}/projects`)).toHaveLength(1);
  });

  it('warns when the hook is paused or disabled', async () => {
    gl = await startLoopbackGitLab({ groupId: GROUP });
    gl.setHookState('temporarily_disabled', '2026-12-02T06:00:00Z');
    const lines = new Lines();
    await run(gl, config(gl), {}, lines);
    expect(lines.logs(/GitLab webhook is not executable/)[0]).toMatchObject({ alertStatus: 'temporarily_disabled', disabledUntil: '2026-12-02T06:00:00Z' });
  });

  it('reads RateLimit-* and stops before the reserve, publishing what is left with the provider named', async () => {
    gl = await startLoopbackGitLab({ groupId: GROUP, rateLimit: 1000, projectIds: [11, 12, 13, 14] });
    gl.setRateLimitRemaining(204);
    const c = config(gl);
    const lines = new Lines();
    const handler = createReconcileHandler({
      sqs: { send: async () => ({}) } as unknown as SQSClient,
      aws: new AwsCaller({ sleep: async () => {}, baseDelayMs: 1 }),
      loadConfig: async () => c,
      providers: () => ({ gitlab: provider(gl!, c) }),
      queueUrl: 'https://sqs.local/jobs.fifo',
      now: LATER,
      sink: lines.sink,
    });
    // Reserve: max(100, 20% of 1000) = 200; each answer counts down by one.
    const report = await handler();
    expect(report).toMatchObject({ stoppedAt: 'token' });
    expect(gl.requests()).toHaveLength(4);
    expect(lines.json().find((l) => l._aws && l.Credential === 'gitlab-token')?.CiRateLimitRemaining).toEqual([200]);
  });
});
