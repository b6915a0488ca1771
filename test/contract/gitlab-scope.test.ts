import { describe, expect, it } from 'vitest';
import {
  buildFleetConfig,
  fleetGitLabScopes,
  fleetGitLabWebhooks,
  gitLabScopeOf,
  GitLabRunnerType,
  GitLabWebhookOwner,
  LabelMatch,
  Provider,
  type FleetConfigInput,
  type PoolInput,
} from '../../lambdas/shared/contract';
import { candidatePools } from '../../lambdas/shared/candidate-pools';
import { classifyGitLabDelivery } from '../../lambdas/webhook/gitlab-delivery';
import { overlapRefusals } from '../../lib/overlap-check';

const placement = { launchTemplateId: 'lt-0', launchTemplateVersion: '1', subnetIds: ['subnet-1'], instanceTypes: ['t3.micro'] };
const gl = (name: string, extra: Partial<PoolInput> = {}): PoolInput => ({ name, provider: Provider.GITLAB, labels: [name], ...placement, ...extra });

function fleet(pools: PoolInput[], gitlab: Partial<NonNullable<FleetConfigInput['gitlab']>> = {}) {
  return buildFleetConfig({ gitlab: { url: 'https://gitlab.example.com', runnerType: GitLabRunnerType.GROUP, scopeId: 12, ...gitlab }, github: { appId: '1', organization: 'acme' }, pools });
}

describe('a GitLab pool\'s runner scope', () => {
  it("is the pool's group or project, else the connection's; written to the FleetConfig only when set", () => {
    const c = fleet([gl('a'), gl('b', { gitlabGroupId: 13 }), gl('c', { gitlabProjectId: 480 }), gl('d', { gitlabGroupId: 13 })]);
    expect(c.pools.map((p) => gitLabScopeOf(c.gitlab!, p))).toEqual([
      { runnerType: GitLabRunnerType.GROUP, scopeId: 12 },
      { runnerType: GitLabRunnerType.GROUP, scopeId: 13 },
      { runnerType: GitLabRunnerType.PROJECT, scopeId: 480 },
      { runnerType: GitLabRunnerType.GROUP, scopeId: 13 },
    ]);
    expect(c.pools[0]).not.toHaveProperty('gitlabGroupId');
    expect(c.pools[0]).not.toHaveProperty('gitlabProjectId');
    // Each scope once, in pool order: two pools of group 13 cost one list.
    expect(fleetGitLabScopes(c.gitlab!, c.pools)).toEqual([
      { runnerType: GitLabRunnerType.GROUP, scopeId: 12 },
      { runnerType: GitLabRunnerType.GROUP, scopeId: 13 },
      { runnerType: GitLabRunnerType.PROJECT, scopeId: 480 },
    ]);
  });

  it('an instance connection keeps instance runners for pools without a scope of their own', () => {
    const c = fleet([gl('a'), gl('b', { gitlabProjectId: 7 })], { runnerType: GitLabRunnerType.INSTANCE, scopeId: undefined });
    expect(fleetGitLabScopes(c.gitlab!, c.pools)).toEqual([{ runnerType: GitLabRunnerType.INSTANCE }, { runnerType: GitLabRunnerType.PROJECT, scopeId: 7 }]);
  });

  it('a job of a project is a candidate of the pools whose scope can serve it: a project pool only its own project', () => {
    const c = fleet([gl('a'), gl('p', { gitlabProjectId: 480 })]);
    expect(candidatePools(c, { provider: Provider.GITLAB, projectId: 480 }).map((p) => p.name)).toEqual(['a', 'p']);
    expect(candidatePools(c, { provider: Provider.GITLAB, projectId: 381 }).map((p) => p.name)).toEqual(['a']);
    // GitHub jobs and GitLab jobs without a project see every pool.
    expect(candidatePools(c, { provider: Provider.GITHUB }).length).toBe(2);
    // The webhook ignores a project no pool serves, and takes one any pool serves.
    const only = fleet([gl('p', { gitlabProjectId: 480 }), gl('q', { gitlabProjectId: 481 })], { runnerType: GitLabRunnerType.PROJECT, scopeId: 480 });
    const hook = (projectId: number) => ({ object_kind: 'build', build_status: 'pending', build_id: 9, project_id: projectId, project: { id: projectId, path_with_namespace: 'g/app' } });
    expect(classifyGitLabDelivery(hook(481), only.gitlab, only.pools)).toMatchObject({ kind: 'job' });
    expect(classifyGitLabDelivery(hook(482), only.gitlab, only.pools)).toMatchObject({ kind: 'ignore', reason: 'project-not-served' });
  });

  it("the reconciler's webhooks: the connection's and each pool's own, owned by the pool's scope, each once", () => {
    const c = fleet([gl('a', { gitlabWebhookId: 5 }), gl('b', { gitlabGroupId: 13, gitlabWebhookId: 6 }), gl('c', { gitlabGroupId: 13, gitlabWebhookId: 6 }), gl('d', { gitlabProjectId: 480, gitlabWebhookId: 6 })], { webhookId: 5 });
    expect(fleetGitLabWebhooks(c.gitlab!, c.pools)).toEqual([
      { owner: GitLabWebhookOwner.GROUP, ownerId: 12, hookId: 5 },
      { owner: GitLabWebhookOwner.GROUP, ownerId: 13, hookId: 6 },
      { owner: GitLabWebhookOwner.PROJECT, ownerId: 480, hookId: 6 },
    ]);
  });
});

describe('validation of pool scopes names the prop', () => {
  it.each<[string, () => unknown, RegExp]>([
    ['a GitLab group on a GitHub pool', () => fleet([{ name: 'gh', provider: Provider.GITHUB, ...placement, gitlabGroupId: 3 }]), /pools\[0\]\.gitlabGroupId is set on a github pool: only a GitLab pool registers in a GitLab group or project/],
    ['a GitLab project on a GitHub pool', () => fleet([gl('a'), { name: 'gh', provider: Provider.GITHUB, ...placement, gitlabProjectId: 3 }]), /pools\[1\]\.gitlabProjectId is set on a github pool/],
    ['both a group and a project', () => fleet([gl('a', { gitlabGroupId: 3, gitlabProjectId: 4 })]), /pools\[0\]\.gitlabProjectId is set together with gitlabGroupId: a runner is registered in a group or in a project; set one/],
    ['a group id that is not a positive integer', () => fleet([gl('a', { gitlabGroupId: 0 })]), /pools\[0\]\.gitlabGroupId must be a whole number of at least 1/],
    ['a project id that is not an integer', () => fleet([gl('a', { gitlabProjectId: 1.5 })]), /pools\[0\]\.gitlabProjectId must be a whole number of at least 1/],
    [
      'a webhook without an owner (instance runners)',
      () => fleet([gl('a', { gitlabWebhookId: 3 })], { runnerType: GitLabRunnerType.INSTANCE, scopeId: undefined }),
      /pools\[0\]\.gitlabWebhookId needs an owner: set the pool's gitlabGroupId or gitlabProjectId/,
    ],
  ])('refuses %s', (_what, build, message) => {
    expect(build).toThrow(message);
  });

  // Refused at synth (lib/overlap-check.ts), with the other pools that compete for one job.
  const clashes = (pools: PoolInput[], gitlab: Partial<NonNullable<FleetConfigInput['gitlab']>> = {}) => overlapRefusals(fleet(pools, gitlab)).filter((r) => r.includes('register in different scopes'));

  it.each<[string, PoolInput[], string]>([
    ['equal tags in two groups', [gl('a', { labels: ['linux'] }), gl('b', { labels: ['linux'], gitlabGroupId: 13 })], 'labels (pool "b", gitlabGroupId 13'],
    ['a group pool and a project pool the project may belong to', [gl('a', { labels: ['linux'] }), gl('b', { labels: ['linux'], gitlabProjectId: 480 })], 'labels (pool "b", gitlabProjectId 480'],
    ['a subset pool offering what another scope\'s pool asks for', [gl('a', { labels: ['linux', 'big'], labelMatch: LabelMatch.SUBSET }), gl('b', { labels: ['linux'], gitlabGroupId: 13 })], 'labels (pool "b", gitlabGroupId 13'],
    ['an exact pool asking for tags a subset pool of another group offers', [gl('a', { labels: ['linux'] }), gl('b', { labels: ['linux', 'big'], labelMatch: LabelMatch.SUBSET, gitlabGroupId: 13 })], 'labels (pool "b", gitlabGroupId 13'],
    ['two pools taking untagged jobs', [gl('a', { runUntagged: true }), gl('b', { runUntagged: true, gitlabGroupId: 13 })], 'runUntagged (pool "b", gitlabGroupId 13'],
  ])('refuses two scopes whose pools can match one job: %s', (_what, pools, at) => {
    const prop = at.split(' ')[0];
    expect(clashes(pools)).toEqual([
      `pools[1].${at}) and pools[0].${prop} (pool "a", gitlab.scopeId 12) can match the same GitLab job, but register in different scopes: ` +
        "a Job Hook does not say which group a project belongs to, so a job could be given to the pool whose runners cannot take it; give each scope's pools tags of their own",
    ]);
  });

  it('accepts pools of two projects with equal tags (a job has one project), and distinct tags in two groups', () => {
    expect(clashes([gl('a', { labels: ['linux'], gitlabProjectId: 1 }), gl('b', { labels: ['linux'], gitlabProjectId: 2 })])).toEqual([]);
    expect(clashes([gl('a', { labels: ['linux'] }), gl('b', { labels: ['linux', 'other'], gitlabGroupId: 13 })])).toEqual([]);
  });

  it('accepts an untagged-only pool beside a tagged subset pool of another group: no job matches both', () => {
    // a takes only untagged jobs (no tags), b only jobs with tags: a job's tags cannot match both.
    expect(clashes([gl('a', { labels: [], runUntagged: true }), gl('b', { labels: ['linux'], labelMatch: LabelMatch.SUBSET, gitlabGroupId: 40 })])).toEqual([]);
  });

  it('accepts project and group pools under an instance connection (the admin token can create both)', () => {
    expect(() => fleet([gl('a', { gitlabGroupId: 3, gitlabWebhookId: 1 }), gl('b', { gitlabProjectId: 4 })], { runnerType: GitLabRunnerType.INSTANCE, scopeId: undefined })).not.toThrow();
  });
});
