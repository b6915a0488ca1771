import { App, Duration, Stack } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import { describe, expect, it } from 'vitest';
import { Provider, tagKeys } from '../../lambdas/shared/contract';
import { WarmRunners, decodeUserData, type RunnerPoolProps } from '../../lib';
import { isAllowed, rolePolicyStatements } from './iam-eval';

const PSEUDO = { 'AWS::Partition': 'aws', 'AWS::Region': 'eu-west-1', 'AWS::AccountId': '111122223333', 'AWS::URLSuffix': 'amazonaws.com' };
const own = 'arn:aws:ec2:eu-west-1:111122223333:instance/i-0aaaaaaaaaaaaaaaa';
const other = 'arn:aws:ec2:eu-west-1:111122223333:instance/i-0bbbbbbbbbbbbbbbb';
const keys = tagKeys('warm-runners');
const poolTag = `aws:ResourceTag/${keys.pool}`;

function synth(reuse: RunnerPoolProps['reuse']): Template {
  const s = new Stack(new App(), 'R');
  new WarmRunners(s, 'Runners', {
    vpc: new ec2.Vpc(s, 'Vpc'),
    github: { appId: '1', organization: 'org' },
    pools: [{ name: 'linux', provider: Provider.GITHUB, machineImage: ec2.MachineImage.latestAmazonLinux2023(), ...(reuse ? { reuse } : {}) }],
  });
  return Template.fromStack(s);
}

// The boot script's park (templates/start-runner.sh): these tags, on itself alone, only for pools
// with reuse. Never the affinity: only scale-up writes it (R1).
describe('instance role with reuse', () => {
  const ctx = (target: string, tagKeys: string[]) => ({ 'ec2:SourceInstanceARN': own, 'aws:ARN': target, 'aws:TagKeys': tagKeys, [poolTag]: 'linux' });
  const park = [keys.parking, keys.uses, keys.warmStandby];
  const unpark = [keys.activatedAt, keys.traceId, keys.jobId, keys.runnerId, keys.jobStarted, keys.idleSince];

  it('may tag and untag itself to park, nothing more, and only when a pool has reuse', () => {
    const statements = rolePolicyStatements(synth({ maxJobs: 5, maxAge: Duration.hours(2), cacheDirectories: ['/var/cache/tool'] }), 'RunnersFleetRole', PSEUDO);
    const rows: [string, string, string, Record<string, string | string[]>, boolean][] = [
      ['its parking tags', 'ec2:CreateTags', own, ctx(own, park), true],
      ['its activation tags removed', 'ec2:DeleteTags', own, ctx(own, unpark), true],
      ["another instance's parking tags", 'ec2:CreateTags', other, ctx(other, park), false],
      ["another instance's activation tags removed", 'ec2:DeleteTags', other, ctx(other, unpark), false],
      ['its activation written', 'ec2:CreateTags', own, ctx(own, [keys.activatedAt]), false],
      ['its pool tag removed', 'ec2:DeleteTags', own, ctx(own, [keys.pool]), false],
      // The park keeps its parking tag (the pool bounds a parking instance by it).
      ['its parking tag removed', 'ec2:DeleteTags', own, ctx(own, [keys.parking]), false],
      ['its affinity removed', 'ec2:DeleteTags', own, ctx(own, [keys.affinity]), false],
      ['its affinity written', 'ec2:CreateTags', own, ctx(own, [keys.affinity]), false],
      ['its affinity written with its parking tags', 'ec2:CreateTags', own, ctx(own, [...park, keys.affinity]), false],
    ];
    for (const [name, action, resource, context, allowed] of rows) expect(isAllowed(statements, { action, resource, context }), name).toBe(allowed);
    const withoutReuse = rolePolicyStatements(synth(undefined), 'RunnersFleetRole', PSEUDO);
    expect(isAllowed(withoutReuse, { action: 'ec2:CreateTags', resource: own, context: ctx(own, park) })).toBe(false);
    expect(isAllowed(withoutReuse, { action: 'ec2:DeleteTags', resource: own, context: ctx(own, unpark) })).toBe(false);
  });

  it("renders the pool's reuse into its launch template's boot script", () => {
    const t = synth({ maxJobs: 5, maxAge: Duration.hours(2), cacheDirectories: ['/var/cache/tool'] });
    const [lt] = Object.values(t.findResources('AWS::EC2::LaunchTemplate'));
    const script = decodeUserData(lt!.Properties.LaunchTemplateData.UserData as string);
    expect(script).toContain(' REUSE=1 MAX_JOBS=5 MAX_AGE=7200 ');
    expect(script).toContain('CACHES=(/var/cache/tool) ');
  });
});
