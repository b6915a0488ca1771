import { App, Stack } from 'aws-cdk-lib';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import { Template } from 'aws-cdk-lib/assertions';
import { beforeAll, describe, expect, it } from 'vitest';
import { WarmRunners, type RunnerPoolProps, type WarmRunnersProps } from '../../lib';
import { parseFleetConfig, Provider, ssmPaths, DEFAULT_PREFIX } from '../../lambdas/shared/contract';
import { allowed, denials, arn, synth, type Fleet } from './iam-fleet';

/** Synth of GitHub pool scopes: several organisations, repositories, an enterprise; what synth refuses. */

const image = ec2.MachineImage.latestAmazonLinux2023();
const pool = (name: string, extra: Partial<RunnerPoolProps> = {}): RunnerPoolProps => ({ name, provider: Provider.GITHUB, machineImage: image, ...extra });

function fleet(props: Partial<WarmRunnersProps>): { template: Template } {
  const stack = new Stack(new App(), 'S');
  new WarmRunners(stack, 'R', { vpc: new ec2.Vpc(stack, 'Vpc'), pools: [pool('linux')], ...props });
  return { template: Template.fromStack(stack) };
}

function fleetConfigOf(template: Template) {
  const params = template.findResources('AWS::SSM::Parameter', { Properties: { Name: ssmPaths(DEFAULT_PREFIX).fleetConfig } });
  const value = Object.values(params)[0]!.Properties.Value as unknown;
  // The config is a plain JSON string unless tokens (launch template ids) are joined in.
  const text = typeof value === 'string' ? value : (value as { 'Fn::Join': [string, unknown[]] })['Fn::Join'][1].map((p) => (typeof p === 'string' ? p : 'x')).join('');
  return parseFleetConfig(text);
}

describe('GitHub pool scopes at synth', () => {
  it('carries each pool\'s organisation, repositories and enterprise into the FleetConfig; a pool without one takes the connection\'s', () => {
    const { template } = fleet({
      github: { appId: '1', organization: 'acme' },
      pools: [pool('linux'), pool('second', { organization: 'globex', labels: ['linux'] }), pool('repo', { repositories: ['initech/app'] }), pool('ent', { enterprise: 'umbrella', labels: ['big'] })],
    });
    const config = fleetConfigOf(template);
    expect(config.pools.map((p) => [p.name, p.organization, p.repositories, p.enterprise])).toEqual([
      ['linux', undefined, undefined, undefined],
      ['second', 'globex', undefined, undefined],
      ['repo', undefined, ['initech/app'], undefined],
      ['ent', undefined, undefined, 'umbrella'],
    ]);
  });

  it('refuses organization together with repositories on the connection, naming both', () => {
    expect(() => fleet({ github: { appId: '1', organization: 'acme', repositories: ['acme/app'] } })).toThrow(/github\.organization and repositories are both set/);
  });

  it('refuses organization together with repositories on a pool, naming the pool\'s both props', () => {
    expect(() => fleet({ github: { appId: '1', organization: 'acme' }, pools: [pool('linux'), pool('both', { organization: 'globex', repositories: ['globex/app'] })] })).toThrow(
      /pools\[1\]\.organization \(pool "both"\) and repositories are both set/,
    );
  });

  it('refuses GitHub scope props on a GitLab pool', () => {
    expect(() =>
      fleet({ gitlab: { url: 'https://gitlab.example.com' }, pools: [{ name: 'gl', provider: Provider.GITLAB, machineImage: image, organization: 'acme' }] }),
    ).toThrow(/pools\[0\]\.organization \(pool "gl"\) is a GitHub scope, but the pool's provider is "gitlab"/);
  });

  it('refuses a GitHub pool with no organisation or repositories, its own or the connection\'s', () => {
    expect(() => fleet({ github: { appId: '1' }, pools: [pool('own', { organization: 'acme' }), pool('none', { labels: ['x'] })] })).toThrow(/pools\[1\]\.organization \(pool "none"\) or repositories \("owner\/repo"\) must be set/);
    expect(() => fleet({ github: { appId: '1' }, pools: [pool('own', { organization: 'acme' })] })).not.toThrow();
  });

  it('refuses a runner group other than the default while a pool registers at an enterprise, naming both props', () => {
    const github = { appId: '1', organization: 'acme', runnerGroupId: 5 };
    expect(() => fleet({ github, pools: [pool('linux'), pool('ent', { enterprise: 'umbrella', labels: ['big'] })] })).toThrow(
      /github\.runnerGroupId is 5, but pool "ent" registers at enterprise "umbrella" \(pools\[1\]\.enterprise\).*leave github\.runnerGroupId at 1/,
    );
    expect(() => fleet({ github: { ...github, enterprise: 'umbrella' } })).toThrow(/github\.runnerGroupId is 5, but pool "linux" registers at enterprise "umbrella" \(github\.enterprise\)/);
    expect(() => fleet({ github: { ...github, runnerGroupId: 1 }, pools: [pool('ent', { enterprise: 'umbrella' })] })).not.toThrow();
    expect(() => fleet({ github })).not.toThrow();
  });

  it('refuses a malformed organisation or enterprise, naming the prop', () => {
    expect(() => fleet({ github: { appId: '1', organization: 'acme' }, pools: [pool('bad', { organization: 'acme/app' })] })).toThrow(/pools\[0\]\.organization \(pool "bad"\) must be a GitHub organisation login/);
    expect(() => fleet({ github: { appId: '1', organization: 'acme', enterprise: '-x' } })).toThrow(/github\.enterprise must be an enterprise slug/);
  });
});

describe('the enterprise token parameter', () => {
  let f: Fleet;
  const token = ssmPaths(DEFAULT_PREFIX).githubEnterpriseToken;
  const read = (name: string) => ({ name, action: 'ssm:GetParameter', resourceType: 'parameter', resource: arn('ssm', `parameter${token}`), facts: {} });
  beforeAll(() => {
    f = synth({ enterprise: true });
  });

  it('is read by the functions that register, list and delete runners', async () => {
    for (const role of ['RunnersScaleUpRole', 'RunnersScaleDownRole', 'RunnersDrainDrainRole']) expect(await denials(f.statements(role), [read(role)])).toEqual([]);
  });

  it('is read by no other function', async () => {
    for (const role of ['RunnersWebhookRole', 'RunnersReconcileFunctionRole', 'RunnersPoolRole']) expect(await allowed(f.statements(role), [read(role)])).toEqual([]);
  });

  it('is not granted at all when no pool registers at an enterprise', async () => {
    const plain = synth({});
    for (const role of ['RunnersScaleUpRole', 'RunnersScaleDownRole', 'RunnersDrainDrainRole']) expect(await allowed(plain.statements(role), [read(role)])).toEqual([]);
  });
});
