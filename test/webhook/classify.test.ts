import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import examples from '@octokit/webhooks-examples';
import { describe, expect, it } from 'vitest';
import { Provider, GitLabRunnerType, type GitHubConnectionConfig, type GitLabConnectionConfig, type PoolConfig } from '../../lambdas/shared/contract';
import { classifyGitHubDelivery } from '../../lambdas/webhook/github-delivery';
import { classifyGitLabDelivery } from '../../lambdas/webhook/gitlab-delivery';

type Example = { action: string; workflow_job: Record<string, unknown>; repository: Record<string, unknown> };
const queued = structuredClone((examples.find((e) => e.name === 'workflow_job')!.examples as unknown as Example[]).find((e) => e.action === 'queued' && (e.workflow_job.labels as string[]).includes('k8s'))!);
const jobHook = JSON.parse(readFileSync(join(__dirname, 'fixtures', 'gitlab-job-hook.json'), 'utf8')) as Record<string, unknown>;

const org = (organization: string): GitHubConnectionConfig => ({ appId: '1', organization, repositories: [], runnerGroupId: 1, apiUrl: 'https://api.github.com' });
const repos = (...repositories: string[]): GitHubConnectionConfig => ({ appId: '1', repositories, runnerGroupId: 1, apiUrl: 'https://api.github.com' });
/** A GitHub pool: the connection's scope unless `scope` names its own. */
const ghPool = (name: string, scope: Partial<Pick<PoolConfig, 'organization' | 'repositories' | 'enterprise'>> = {}) => ({ name, provider: Provider.GITHUB, labels: ['k8s'], ...scope }) as PoolConfig;
const POOLS = [ghPool('default')];
const withJob = (patch: Record<string, unknown>) => ({ ...queued, workflow_job: { ...queued.workflow_job, ...patch } });

describe('classifyGitHubDelivery', () => {
  it.each([
    ['queued, served repository', 'workflow_job', queued, repos('lineville/elastic-machines-testing'), 'job'],
    ['queued, repository names compare case-insensitively', 'workflow_job', queued, repos('LineVille/Elastic-Machines-Testing'), 'job'],
    ['queued, served organisation', 'workflow_job', queued, org('LINEVILLE'), 'job'],
    ['queued, another organisation', 'workflow_job', queued, org('acme'), 'ignore:repository-not-served'],
    ['queued, another repository', 'workflow_job', queued, repos('lineville/other'), 'ignore:repository-not-served'],
    ['queued, no GitHub connection', 'workflow_job', queued, undefined, 'ignore:no-github-connection'],
    ['waiting', 'workflow_job', { ...queued, action: 'waiting' }, org('lineville'), 'ignore:action-waiting'],
    ['in_progress', 'workflow_job', { ...queued, action: 'in_progress' }, org('lineville'), 'ignore:action-in_progress'],
    ['completed', 'workflow_job', { ...queued, action: 'completed' }, org('lineville'), 'ignore:action-completed'],
    ['an action GitHub may add later', 'workflow_job', { ...queued, action: 'teleported' }, org('lineville'), 'ignore:action-other'],
    ['ping', 'ping', { zen: 'Keep it logically awesome.', hook_id: 1 }, org('lineville'), 'ignore:ping'],
    ['another event', 'push', { ref: 'refs/heads/main' }, org('lineville'), 'ignore:event-not-workflow_job'],
    ['not an object', 'workflow_job', [queued], org('lineville'), 'invalid'],
    ['no action', 'workflow_job', { ...queued, action: undefined }, org('lineville'), 'invalid'],
    ['no workflow_job', 'workflow_job', { ...queued, workflow_job: undefined }, org('lineville'), 'invalid'],
    ['no repository', 'workflow_job', { ...queued, repository: null }, org('lineville'), 'invalid'],
    ['id not an integer', 'workflow_job', withJob({ id: 1.5 }), org('lineville'), 'invalid'],
    ['id negative', 'workflow_job', withJob({ id: -1 }), org('lineville'), 'invalid'],
    ['labels not a list', 'workflow_job', withJob({ labels: 'self-hosted' }), org('lineville'), 'invalid'],
    ['an empty label', 'workflow_job', withJob({ labels: ['self-hosted', ''] }), org('lineville'), 'invalid'],
    ['no owner login', 'workflow_job', { ...queued, repository: { ...queued.repository, owner: {} } }, org('lineville'), 'invalid'],
  ] as const)('%s', (_name, event, payload, github, expected) => {
    const c = classifyGitHubDelivery(event, payload, github, POOLS);
    expect(c.kind === 'ignore' ? `ignore:${c.reason}` : c.kind).toBe(expected);
  });

  it('serves every organisation a pool names, besides the connection\'s, and no other', () => {
    const pools = [ghPool('default'), ghPool('second', { organization: 'LineVille' }), ghPool('repo', { repositories: ['other/app'] })];
    expect(classifyGitHubDelivery('workflow_job', queued, org('acme'), pools).kind).toBe('job');
    expect(classifyGitHubDelivery('workflow_job', queued, org('acme'), [ghPool('default'), ghPool('repo', { repositories: ['other/app'] })])).toMatchObject({ kind: 'ignore', reason: 'repository-not-served' });
    // A pool needs no connection scope when it names its own.
    expect(classifyGitHubDelivery('workflow_job', queued, repos(), [ghPool('only', { organization: 'lineville' })]).kind).toBe('job');
  });

  it('takes the job fields from the payload', () => {
    expect(classifyGitHubDelivery('workflow_job', queued, org('lineville'), POOLS)).toEqual({
      kind: 'job',
      job: { provider: Provider.GITHUB, providerJobId: '12877621891', owner: 'lineville', project: 'elastic-machines-testing', labels: ['self-hosted', 'k8s'], createdAt: '2023-04-19T21:12:12.000Z' },
    });
  });

  it('keeps the job without a creation time when created_at is missing or unreadable (it only loses the lateness check)', () => {
    for (const created_at of [undefined, 'yesterday', 42]) {
      const c = classifyGitHubDelivery('workflow_job', withJob({ created_at }), org('lineville'), POOLS);
      expect(c.kind).toBe('job');
      expect(c.kind === 'job' && c.job.createdAt).toBeUndefined();
    }
  });
});

describe('classifyGitLabDelivery', () => {
  const hook = (patch: Record<string, unknown>) => ({ ...jobHook, build_status: 'pending', runner: null, ...patch });
  it.each([
    ['pending', hook({}), 'job'],
    ['created', hook({ build_status: 'created' }), 'ignore:status-created'],
    ['running', hook({ build_status: 'running' }), 'ignore:status-running'],
    ['success', hook({ build_status: 'success' }), 'ignore:status-success'],
    ['a status with odd characters', hook({ build_status: 'Pending!' }), 'ignore:status-other'],
    ['pipeline hook', { object_kind: 'pipeline', object_attributes: {} }, 'ignore:not-a-job-hook'],
    ['system hook with event_name', { event_name: 'project_create' }, 'ignore:not-a-job-hook'],
    ['no object_kind', { build_status: 'pending' }, 'invalid'],
    ['no build_status', hook({ build_status: undefined }), 'invalid'],
    ['build_id a string', hook({ build_id: '1977' }), 'invalid'],
    ['no project id anywhere', hook({ project_id: undefined, project: { path_with_namespace: 'a/b' } }), 'invalid'],
    ['project id only in project', hook({ project_id: undefined }), 'job'],
    ['no project path', hook({ project: { id: 380 }, project_name: undefined }), 'invalid'],
    ['array body', [hook({})], 'invalid'],
  ] as const)('%s', (_name, payload, expected) => {
    const c = classifyGitLabDelivery(payload);
    expect(c.kind === 'ignore' ? `ignore:${c.reason}` : c.kind).toBe(expected);
  });

  const gl = (runnerType: GitLabConnectionConfig['runnerType'], scopeId?: number): GitLabConnectionConfig => ({ url: 'https://gitlab.example.com', runnerType, ...(scopeId === undefined ? {} : { scopeId }) });
  it.each([
    ['project runners of the job\'s project', gl(GitLabRunnerType.PROJECT, 380), 'job'],
    ['project runners of another project', gl(GitLabRunnerType.PROJECT, 381), 'ignore:project-not-served'],
    ['project runners, project id only in project', gl(GitLabRunnerType.PROJECT, 381), 'ignore:project-not-served', { project_id: undefined }],
    ['group runners (the hook must be the group\'s; not checkable from the payload)', gl(GitLabRunnerType.GROUP, 12), 'job'],
    ['instance runners serve every project', gl(GitLabRunnerType.INSTANCE), 'job'],
    ['another project, but not pending: ignored for its status first', gl(GitLabRunnerType.PROJECT, 381), 'ignore:status-running', { build_status: 'running' }],
  ] as const)('runner scope: %s', (_name, gitlab, expected, patch: Record<string, unknown> = {}) => {
    const c = classifyGitLabDelivery(hook(patch), gitlab);
    expect(c.kind === 'ignore' ? `ignore:${c.reason}` : c.kind).toBe(expected);
  });

  it('splits nested namespaces at the last slash', () => {
    const c = classifyGitLabDelivery(hook({ project: { id: 380, path_with_namespace: 'group/sub/app' } }));
    expect(c).toEqual({ kind: 'job', job: { provider: Provider.GITLAB, providerJobId: '1977', owner: 'group/sub', project: 'app', projectId: 380, labels: [], createdAt: '2021-02-23T02:41:37.000Z' } });
  });

  it('reads the creation time from build_created_at_iso, else from the older "2021-02-23 02:41:37 UTC" form of build_created_at', () => {
    const createdAt = (patch: Record<string, unknown>) => {
      const c = classifyGitLabDelivery(hook(patch));
      return c.kind === 'job' ? c.job.createdAt : c.kind;
    };
    expect(createdAt({})).toBe('2021-02-23T02:41:37.000Z');
    expect(createdAt({ build_created_at_iso: undefined, build_created_at: '2021-02-23 02:41:37 UTC' })).toBe('2021-02-23T02:41:37.000Z');
    expect(createdAt({ build_created_at_iso: undefined, build_created_at: undefined })).toBeUndefined();
    expect(createdAt({ build_created_at_iso: 'soon', build_created_at: null })).toBeUndefined();
  });
});
