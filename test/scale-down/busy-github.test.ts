import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { GitHubProvider } from '../../lambdas/ci';
import { buildFleetConfig, JOB_MESSAGE_SCHEMA_VERSION, Provider, type FleetConfig, type JobMessage } from '../../lambdas/shared/contract';
import { startLoopbackGitHub, type LoopbackGitHub } from '../../local/ci/github-server';
import { FakeAws } from '../support/fake-aws';
import { KEYS, Lines, PREFIX, standbyTags } from '../support/fixtures';
import { BusySweeps } from './busy-sweeps';

/**
 * The scale-down against the loopback GitHub in its `busyFalseMidJob` mode (GitHub as seen:
 * `busy: false` for a runner in the middle of its job, and the DELETE accepted), through the
 * real GitHub provider: a runner whose instance reported its job start is never deregistered,
 * so its job is never cut off; without that report the same readings do cut it off, which is
 * what the mode is for.
 */
const ORG = 'acme';
let gh: LoopbackGitHub;
let aws: FakeAws;
let lines: Lines;
let sweeper: BusySweeps;

beforeEach(async () => {
  aws = new FakeAws();
  lines = new Lines();
  sweeper = new BusySweeps({ aws, lines, fleet });
  // The server's liveness clock stands still: no runner is lost for going quiet mid-job.
  gh = await startLoopbackGitHub({ organization: ORG, busyFalseMidJob: true, jobSeconds: 3600, now: () => 0 });
});
afterEach(async () => {
  aws.restore();
  await gh.close();
});

function fleet(): FleetConfig {
  return buildFleetConfig({
    prefix: PREFIX,
    github: { appId: gh.appId, organization: ORG, apiUrl: gh.url },
    pools: [{ name: 'linux', provider: Provider.GITHUB, labels: ['linux'], launchTemplateId: 'lt-0', launchTemplateVersion: '1', subnetIds: ['subnet-1'], instanceTypes: ['t3.micro'] }],
  });
}

function message(jobId: number): JobMessage {
  return {
    schemaVersion: JOB_MESSAGE_SCHEMA_VERSION,
    provider: Provider.GITHUB,
    jobId: `github:${jobId}`,
    providerJobId: String(jobId),
    pool: 'linux',
    owner: ORG,
    project: 'app',
    labels: ['self-hosted', 'linux'],
    labelsResolved: true,
    traceId: `t-${jobId}`,
    deliveryId: `d-${jobId}`,
    receivedAt: new Date().toISOString(),
  };
}

/** An activated instance whose runner has taken its job at the loopback GitHub. */
async function runnerMidJob(provider: GitHubProvider, reportedStart: boolean) {
  const job = gh.addJob(`${ORG}/app`, ['self-hosted', 'linux']);
  const instance = aws.addInstance({ state: 'running', tags: { ...standbyTags(), [KEYS.activatedAt]: aws.now.toISOString(), [KEYS.jobId]: `github:${job.id}` } });
  const reg = await provider.createRunner(message(job.id), instance.id, 'linux');
  instance.tags.set(KEYS.runnerId, reg.runnerId);
  if (reportedStart) instance.tags.set(KEYS.jobStarted, aws.now.toISOString());
  // Act as the runner: connect, take the job (step by step, no timing).
  const { runnerId, secret } = JSON.parse(Buffer.from(reg.secret, 'base64').toString()) as { runnerId: number; secret: string };
  const local = (path: string) => fetch(`${gh.url}/_local/github/runners/${runnerId}/${path}`, { method: 'POST', headers: { authorization: `Bearer ${secret}` } });
  expect((await local('session')).status).toBe(200);
  expect((await local('acquire')).status).toBe(200);
  return { job, instance, reg };
}

/** Sweeps every 5 minutes from 31 minutes after the activation (busy-sweeps.ts). */
const sweeps = (provider: GitHubProvider, count: number) => sweeper.run(Provider.GITHUB, provider, count);

describe('scale-down against a GitHub that reports busy: false mid-job and accepts the DELETE', () => {
  it('the provider reads the working runner as idle (the mode is on)', async () => {
    const provider = new GitHubProvider({ prefix: PREFIX, github: fleet().github!, pools: fleet().pools, privateKey: async () => gh.privateKeyPem });
    const { reg } = await runnerMidJob(provider, true);
    expect(await provider.listRunners()).toEqual([expect.objectContaining({ runnerId: reg.runnerId, status: 'online', busy: false })]);
  });

  it('never deregisters a runner whose instance reported its job start: its job runs on', async () => {
    const provider = new GitHubProvider({ prefix: PREFIX, github: fleet().github!, pools: fleet().pools, privateKey: async () => gh.privateKeyPem });
    const { job, instance, reg } = await runnerMidJob(provider, true);
    await sweeps(provider, 6);
    expect(gh.runners().map((r) => String(r.id))).toEqual([reg.runnerId]);
    expect(gh.jobs().find((j) => j.id === job.id)).toMatchObject({ status: 'in_progress' });
    expect(instance.state).toBe('running');
  });

  it('without the report, two idle readings a window apart deregister it: the job is cut off (what the report prevents)', async () => {
    const provider = new GitHubProvider({ prefix: PREFIX, github: fleet().github!, pools: fleet().pools, privateKey: async () => gh.privateKeyPem });
    const { job, instance } = await runnerMidJob(provider, false);
    // One reading marks only: one wrong reading alone cuts nothing off.
    await sweeps(provider, 1);
    expect(gh.jobs().find((j) => j.id === job.id)).toMatchObject({ status: 'in_progress' });
    await sweeps(provider, 1);
    expect(gh.runners()).toEqual([]);
    expect(gh.jobs().find((j) => j.id === job.id)).toMatchObject({ status: 'completed', conclusion: 'failure' });
    expect(instance.state).not.toBe('running');
  });
});
