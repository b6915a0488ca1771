import { GetParameterCommand, SSMClient } from '@aws-sdk/client-ssm';
import { mockClient } from 'aws-sdk-client-mock';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createCiProviders } from '../../lambdas/ci';
import { scaleSetApiFor, type InstallationCaller } from '../../lambdas/ci/scale-set';
import { DynamoScaleSetLeases } from '../../lambdas/scale-set-listener/lease';
import { pollScaleSet, type PollOutcome } from '../../lambdas/scale-set-listener/poll';
import { AwsCaller } from '../../lambdas/shared/aws-call';
import { buildFleetConfig, Provider, ssmPaths, type FleetConfig, type PoolConfig, type PoolScaleSetConfig, type ScaleSetDemand } from '../../lambdas/shared/contract';
import { createLogger } from '../../lambdas/shared/log';
import { startLoopbackGitHub, type LoopbackGitHub } from '../../local/ci/github-server';
import { createJobRecordTable } from '../support/moto-fleet';
import { motoForFile } from '../support/moto-per-file';
import { scaled } from '../support/slowdown';

/**
 * The lease under concurrent pollers with the real parts: the DynamoDB lease against moto and
 * the real scale-set client against the loopback GitHub's scale-set service. One session per
 * scale set is the loopback's own enforcement (a second create is 409, a stale queue token
 * 401), so a low poll count alone (`peakPolls`, the GetMessage polls in flight at once) does
 * not show one poller. What shows the lease at work: several pollers start at once each round
 * (as overlapping scheduled invocations would), exactly one polls and the rest find it held,
 * and none of them ever meets the loopback's refusals (no 409 on a session create, no 401).
 */

const TABLE = 'job-records';
const PREFIX = 'sst';
const ORG = 'acme';
const m = motoForFile(async (f) => {
  await createJobRecordTable(f.dynamo, TABLE);
});
const ssm = mockClient(SSMClient);
let gh: LoopbackGitHub;
let config: FleetConfig;

beforeEach(async () => {
  gh = await startLoopbackGitHub({ organization: ORG, jobSeconds: 0.2, runnerWaitSeconds: 5, runnerPollSeconds: 0.1, scaleSet: { longPollSeconds: 0.3 } });
  config = buildFleetConfig({
    prefix: PREFIX,
    github: { appId: gh.appId, organization: ORG, apiUrl: gh.url },
    pools: [{ name: 'linux', provider: Provider.GITHUB, labels: ['linux'], launchTemplateId: 'lt-0', launchTemplateVersion: '1', subnetIds: ['subnet-1'], instanceTypes: ['t3.micro'] }],
  });
  ssm.reset();
  ssm.on(GetParameterCommand, { Name: ssmPaths(PREFIX).github.appPrivateKey }).resolves({ Parameter: { Value: gh.privateKeyPem } });
});
afterEach(async () => gh.close());

describe('concurrent pollers against the loopback GitHub', () => {
  it('several pollers at once over rounds: one polls, the others find the lease held; the service sees one poller and no conflict', async () => {
    const pool: PoolConfig & { scaleSet: PoolScaleSetConfig } = { ...config.pools[0]!, scaleSet: { name: 'arc-linux', runnerGroup: 'Default' } };
    // Each poller is its own invocation: its own client (admin token) and lease writer.
    const client = () => {
      const github = createCiProviders(config, { ssm: new SSMClient({ region: 'eu-west-1' }) }).github as unknown as InstallationCaller;
      return scaleSetApiFor(config, pool, { github, timeoutMs: scaled(5_000), longPollTimeoutMs: scaled(5_000) });
    };
    const { id } = await client().ensureScaleSet({ name: 'arc-linux', runnerGroup: 'Default', labels: [] });
    const demands: ScaleSetDemand[] = [];
    const rounds: PollOutcome['kind'][][] = [];
    for (let round = 0; round < 3; round++) {
      gh.addJob(`${ORG}/app`, ['arc-linux']);
      const outcomes = await Promise.all(
        Array.from({ length: 5 }, (_, n) =>
          pollScaleSet(
            {
              api: client(),
              leases: new DynamoScaleSetLeases(new AwsCaller({ sleep: async () => {}, timeoutMs: scaled(8_000) }), m.dynamo, TABLE),
              holder: `r${round}-p${n}`,
              deadline: new Date(Date.now() + scaled(2_500)),
              marginMs: 500,
              demandBoundMs: 250,
              now: () => new Date(),
              log: createLogger({}, () => {}),
              jobEvents: async () => {},
              requestCapacity: async (d) => {
                demands.push(d);
                return { observed: 0, started: 0, unserved: 0, startedRunners: [] };
              },
              traceId: () => `trace-${demands.length}`,
              sleep: async () => {},
            },
            pool,
          ),
        ),
      );
      rounds.push(outcomes.map((o) => o.kind));
    }
    expect(gh.scaleSets.peakPolls(id)).toBe(1);
    // No poller met another's session or token: no session conflict, no queue token taken from under a poll.
    const service = gh.requests().filter((r) => r.credential === 'actions-service' && /\/sessions/.test(r.path));
    expect(service.length).toBeGreaterThan(0);
    expect(service.filter((r) => r.status === 409 || r.status === 401)).toEqual([]);
    for (const kinds of rounds) {
      expect(kinds.filter((k) => k === 'polled')).toHaveLength(1);
      expect(kinds.filter((k) => k === 'held')).toHaveLength(4);
    }
    // One session for the three rounds, kept by the lease; every job's reading demanded.
    expect(gh.scaleSets.list()[0]!.session?.owner).toMatch(/^r0-p\d$/);
    expect(Math.max(...demands.map((d) => d.assignedJobs))).toBe(3);
  });
});
