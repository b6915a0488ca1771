import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { GitLabProvider } from '../../lambdas/ci';
import { buildFleetConfig, GitLabRunnerType, JOB_MESSAGE_SCHEMA_VERSION, Provider, type FleetConfig, type JobMessage } from '../../lambdas/shared/contract';
import { startLoopbackGitLab, type LoopbackGitLab } from '../../local/ci/gitlab-server';
import { FakeAws } from '../support/fake-aws';
import { KEYS, Lines, PREFIX, standbyTags } from '../support/fixtures';
import { BusySweeps } from './busy-sweeps';

/**
 * The scale-down of a fleet whose GitLab pools register in two groups and a project (pool
 * `gitlabGroupId`/`gitlabProjectId`), through the real GitLab provider against the loopback
 * GitLab: a runner whose instance is gone is deleted in whichever scope it was registered,
 * and a runner of a live instance is kept in every scope.
 */
const GROUP = 42;
const OTHER_GROUP = 43;
const PROJECT = 7;
const OTHER_PROJECT = 21;
let gl: LoopbackGitLab;
let aws: FakeAws;
let lines: Lines;

beforeEach(async () => {
  aws = new FakeAws();
  lines = new Lines();
  gl = await startLoopbackGitLab({ groupId: GROUP, groups: [{ id: OTHER_GROUP, projectIds: [OTHER_PROJECT] }] });
});
afterEach(async () => {
  aws.restore();
  await gl.close();
});

function fleet(): FleetConfig {
  const pool = { launchTemplateId: 'lt-0', launchTemplateVersion: '1', subnetIds: ['subnet-1'], instanceTypes: ['t3.micro'] };
  return buildFleetConfig({
    prefix: PREFIX,
    gitlab: { url: gl.url, runnerType: GitLabRunnerType.GROUP, scopeId: GROUP },
    pools: [
      { name: 'linux', provider: Provider.GITLAB, labels: ['linux'], ...pool },
      { name: 'other', provider: Provider.GITLAB, labels: ['other'], gitlabGroupId: OTHER_GROUP, ...pool },
      { name: 'app', provider: Provider.GITLAB, labels: ['app'], gitlabProjectId: PROJECT, ...pool },
    ],
  });
}

function message(jobId: number, pool: string, projectId: number): JobMessage {
  return {
    schemaVersion: JOB_MESSAGE_SCHEMA_VERSION,
    provider: Provider.GITLAB,
    jobId: `gitlab:${jobId}`,
    providerJobId: String(jobId),
    pool,
    owner: 'group',
    project: 'project',
    projectId,
    labels: [],
    labelsResolved: true,
    traceId: `t-${jobId}`,
    deliveryId: `d-${jobId}`,
    receivedAt: new Date().toISOString(),
  };
}

describe('scale-down of a GitLab fleet in two groups and a project', () => {
  it("deletes the runners whose instances are gone in every scope, and keeps a live instance's", async () => {
    const config = fleet();
    const provider = new GitLabProvider({ prefix: PREFIX, gitlab: config.gitlab!, pools: config.pools, token: async () => gl.accessToken, sleep: async () => {}, now: () => aws.now.getTime() });
    const gone: string[] = [];
    for (const [pool, projectId] of [
      ['linux', PROJECT],
      ['other', OTHER_PROJECT],
      ['app', PROJECT],
    ] as const) {
      const reg = await provider.createRunner(message(gl.addJob(projectId, [pool]).id, pool, projectId), `i-0${gone.length}aaaaaaaaaaaaaaaa`.slice(0, 19), pool);
      gone.push(reg.runnerId);
    }
    // A live instance of the other group's pool carries its runner: kept.
    const job = gl.addJob(OTHER_PROJECT, ['other']);
    const live = aws.addInstance({ state: 'running', tags: { ...standbyTags('other'), [KEYS.activatedAt]: aws.now.toISOString(), [KEYS.jobId]: `gitlab:${job.id}`, [KEYS.jobStarted]: aws.now.toISOString() } });
    const kept = await provider.createRunner(message(job.id, 'other', OTHER_PROJECT), live.id, 'other');
    live.tags.set(KEYS.runnerId, kept.runnerId);
    expect(gl.runners().map((r) => [r.runnerType, r.groupId ?? r.projectId])).toEqual([
      ['group_type', GROUP],
      ['group_type', OTHER_GROUP],
      ['project_type', PROJECT],
      ['group_type', OTHER_GROUP],
    ]);
    await new BusySweeps({ aws, lines, fleet }).run(Provider.GITLAB, provider, 1);
    expect(gl.runners().map((r) => String(r.id))).toEqual([kept.runnerId]);
    expect(live.state).toBe('running');
  });
});
