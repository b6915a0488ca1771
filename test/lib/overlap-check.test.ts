import { App, Stack } from 'aws-cdk-lib';
import { Annotations, Match } from 'aws-cdk-lib/assertions';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import { describe, expect, it } from 'vitest';
import { WarmRunners, type RunnerPoolProps, type WarmRunnersProps } from '../../lib';
import { LabelMatch, Provider } from '../../lambdas/shared/contract';

const machineImage = ec2.MachineImage.latestAmazonLinux2023();
function synth(pools: Omit<RunnerPoolProps, 'machineImage'>[]): { runners: WarmRunners; stack: Stack } {
  const stack = new Stack(new App(), 'S');
  const props: WarmRunnersProps = {
    vpc: new ec2.Vpc(stack, 'Vpc'),
    github: { appId: '1', organization: 'org' },
    gitlab: { url: 'https://gitlab.example.com' },
    pools: pools.map((p) => ({ machineImage, ...p })),
  };
  return { runners: new WarmRunners(stack, 'Runners', props), stack };
}
const warnings = (stack: Stack, id: string) =>
  Annotations.fromStack(stack)
    .findWarning('*', Match.stringLikeRegexp(`\\[ack: ${id}\\]`))
    .map((w) => String(w.entry.data));

describe('pools that compete for one job', () => {
  it('refuses a pool that can never get a job, naming both pools, why the other wins and what to do', () => {
    expect(() =>
      synth([
        { name: 'linux', provider: Provider.GITHUB, labels: ['linux', 'x64'] },
        { name: 'linux-big', provider: Provider.GITHUB, labels: ['X64', 'linux'], instanceTypes: [new ec2.InstanceType('m7i.4xlarge')] },
      ]),
    ).toThrow(
      'pools[1] (pool "linux-big") can never get a job: every job it matches also matches pools[0] (pool "linux"), which takes it because it comes first in pools (both have 2 labels, so the order decides). ' +
        'pools[1] (pool "linux-big") has labels [X64, linux] (labelMatch exact), pools[0] (pool "linux") labels [linux, x64] (labelMatch exact). ' +
        'Give one of them other labels (or another labelMatch), or remove pools[1].',
    );
  });

  it('refuses a GitLab subset pool whose only tag an exact pool listed first takes, and not once it takes untagged jobs', () => {
    const pools = (runUntagged: boolean) => [
      { name: 'docker', provider: Provider.GITLAB, labels: ['docker'] },
      { name: 'docker-any', provider: Provider.GITLAB, labels: ['docker'], labelMatch: LabelMatch.SUBSET, runUntagged },
    ];
    expect(() => synth(pools(false))).toThrow(/^pools\[1\] \(pool "docker-any"\) can never get a job: every job it matches also matches pools\[0\] \(pool "docker"\)/);
    const { stack } = synth(pools(true));
    expect(warnings(stack, 'cdk-warm-runners:pool-overlap')).toEqual([
      expect.stringContaining(
        'pools[0] (pool "docker") and pools[1] (pool "docker-any") both match a job asking for [docker]: it goes to pools[0], because it comes first in pools (both have 1 tag, so the order decides)',
      ),
    ]);
  });

  it('pools of two organisations never compete; a pool of one repository of the other\'s organisation does', () => {
    expect(() =>
      synth([
        { name: 'acme', provider: Provider.GITHUB, labels: ['linux'], organization: 'acme' },
        { name: 'globex', provider: Provider.GITHUB, labels: ['linux'], organization: 'globex' },
        { name: 'globex-repos', provider: Provider.GITHUB, labels: ['linux'], repositories: ['other/app'] },
      ]),
    ).not.toThrow();
    expect(() =>
      synth([
        { name: 'acme', provider: Provider.GITHUB, labels: ['linux'], organization: 'ACME' },
        { name: 'acme-app', provider: Provider.GITHUB, labels: ['linux'], repositories: ['acme/app'] },
      ]),
    ).toThrow(/pools\[1\] \(pool "acme-app"\) can never get a job: every job it matches also matches pools\[0\] \(pool "acme"\)/);
  });

  it("refuses a pool only when its scope lies within the winner's: one reaching beyond it gets the order warning", () => {
    const cases: [Partial<RunnerPoolProps>, Partial<RunnerPoolProps>][] = [
      [{ organization: 'acme' }, { repositories: ['acme/app', 'other/tool'] }],
      [{ repositories: ['acme/app'] }, { repositories: ['acme/app', 'acme/tool'] }],
    ];
    for (const [first, second] of cases) {
      const { stack } = synth([
        { name: 'a', provider: Provider.GITHUB, labels: ['linux'], ...first },
        { name: 'b', provider: Provider.GITHUB, labels: ['linux'], ...second },
      ]);
      expect(warnings(stack, 'cdk-warm-runners:pool-overlap')).toEqual([
        expect.stringMatching(/^pools\[0\] \(pool "a"\) and pools\[1\] \(pool "b"\) both match a job asking for \[linux\]: it goes to pools\[0\]/),
      ]);
    }
    // The other way round b's scope lies within a's: refused as before.
    expect(() =>
      synth([
        { name: 'b', provider: Provider.GITHUB, labels: ['linux'], repositories: ['acme/app', 'acme/tool'] },
        { name: 'a', provider: Provider.GITHUB, labels: ['linux'], repositories: ['acme/app'] },
      ]),
    ).toThrow(/pools\[1\] \(pool "a"\) can never get a job/);
  });

  it('GitLab project pools of two projects with equal tags neither refuse nor warn; of one project they do', () => {
    const { stack } = synth([
      { name: 'p1', provider: Provider.GITLAB, labels: ['linux'], gitlabProjectId: 1 },
      { name: 'p2', provider: Provider.GITLAB, labels: ['linux'], gitlabProjectId: 2 },
    ]);
    expect(warnings(stack, 'cdk-warm-runners:pool-overlap')).toEqual([]);
    expect(() =>
      synth([
        { name: 'p1', provider: Provider.GITLAB, labels: ['linux'], gitlabProjectId: 1 },
        { name: 'p2', provider: Provider.GITLAB, labels: ['linux'], gitlabProjectId: 1 },
      ]),
    ).toThrow(/pools\[1\] \(pool "p2"\) can never get a job/);
  });

  it('warns where the order of pools decides, and says nothing where the narrower pool wins by its labels', () => {
    const { stack } = synth([
      { name: 'x64', provider: Provider.GITHUB, labels: ['linux', 'x64'], labelMatch: LabelMatch.SUBSET },
      { name: 'arm', provider: Provider.GITHUB, labels: ['linux', 'arm64'], labelMatch: LabelMatch.SUBSET },
      { name: 'gpu', provider: Provider.GITHUB, labels: ['linux', 'x64', 'gpu'], labelMatch: LabelMatch.SUBSET },
    ]);
    expect(warnings(stack, 'cdk-warm-runners:pool-overlap')).toEqual([
      expect.stringMatching(/^pools\[0\] \(pool "x64"\) and pools\[1\] \(pool "arm"\) both match a job asking for \[linux\]: it goes to pools\[0\], because it comes first in pools/),
    ]);
  });
});

describe('warm schedule windows that overlap', () => {
  it('refuses a window that never applies, naming the windows that cover it', () => {
    expect(() =>
      synth([{ name: 'linux', provider: Provider.GITHUB, warm: { schedule: [{ window: 'MON-FRI 07:00-19:00', size: 5 }, { window: 'WED 09:00-10:00', size: 8 }] } }]),
    ).toThrow(
      'pools[0].warm.schedule[1] (pool "linux") "WED 09:00-10:00" never applies: every minute of it lies in warm.schedule[0] ("MON-FRI 07:00-19:00"), which comes first, and the first matching window wins. ' +
        'Remove it, or put it before the broader window to make it the exception.',
    );
  });

  it('warns where two windows of different sizes overlap, saying which wins', () => {
    const { stack } = synth([{ name: 'linux', provider: Provider.GITHUB, warm: { schedule: [{ window: 'MON-FRI 07:00-19:00', size: 5 }, { window: '* 18:00-20:00', size: 1 }] } }]);
    expect(warnings(stack, 'cdk-warm-runners:schedule-overlap')).toEqual([
      expect.stringContaining(
        'pools[0].warm.schedule[0] ("MON-FRI 07:00-19:00", size 5) and warm.schedule[1] ("* 18:00-20:00", size 1) of pool "linux" overlap: where both apply the warm size is 5, the earlier window\'s',
      ),
    ]);
  });
});

describe('maxRunners 0', () => {
  it('synthesizes a paused pool that keeps its warm settings, and the FleetConfig carries 0', () => {
    const { runners, stack } = synth([{ name: 'linux', provider: Provider.GITHUB, maxRunners: 0, warm: { size: 3, schedule: [{ window: 'MON-FRI 07:00-19:00', size: 5 }] } }]);
    expect(runners.config.pools[0]).toMatchObject({ maxRunners: 0, warm: { size: 3 } });
    expect(Annotations.fromStack(stack).findError('*', Match.anyValue())).toEqual([]);
  });
});
