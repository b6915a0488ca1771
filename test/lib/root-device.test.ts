import { App, Stack } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import { describe, expect, it } from 'vitest';
import { Provider } from '../../lambdas/shared/contract';
import { ParameterMachineImage, WarmRunners, type RunnerPoolProps } from '../../lib';
import { knownRootDeviceName } from '../../lib/root-device';

// Issue 24, section 2: the root device name belongs to the pool (its image's where the
// construct can know it), so an Ubuntu pool and an Amazon Linux pool live in one fleet.
const UBUNTU_2404 = '/aws/service/canonical/ubuntu/server/24.04/stable/current/amd64/hvm/ebs-gp3/ami-id';
const UBUNTU_2204 = '/aws/service/canonical/ubuntu/server/22.04/stable/current/arm64/hvm/ebs-gp2/ami-id';

type PoolSpec = Pick<RunnerPoolProps, 'name' | 'machineImage'> & Partial<RunnerPoolProps>;

/** The root device of each pool's launch template, by pool name. */
function rootDevices(pools: PoolSpec[], fleetRootDeviceName?: string): Record<string, string> {
  const s = new Stack(new App(), 'R', { env: { account: '111111111111', region: 'us-east-1' } });
  new WarmRunners(s, 'Runners', {
    vpc: new ec2.Vpc(s, 'Vpc'),
    github: { appId: '1', organization: 'o' },
    pools: pools.map((p) => ({ provider: Provider.GITHUB, labels: [p.name], ...p })),
    ...(fleetRootDeviceName ? { rootDeviceName: fleetRootDeviceName } : {}),
  });
  const out: Record<string, string> = {};
  for (const lt of Object.values(Template.fromStack(s).findResources('AWS::EC2::LaunchTemplate'))) {
    const name = (lt.Properties.LaunchTemplateData.TagSpecifications as { Tags: { Key: string; Value: string }[] }[])
      .flatMap((t) => t.Tags)
      .find((t) => t.Key.endsWith(':pool'))!.Value;
    const mappings = lt.Properties.LaunchTemplateData.BlockDeviceMappings as { DeviceName: string }[];
    expect(mappings).toHaveLength(1);
    out[name] = mappings[0]!.DeviceName;
  }
  return out;
}

describe('the root device name of a pool', () => {
  it('is taken from the image where the construct knows it: Amazon Linux /dev/xvda beside Canonical Ubuntu /dev/sda1 in one fleet', () => {
    expect(
      rootDevices([
        { name: 'al2023', machineImage: ec2.MachineImage.latestAmazonLinux2023() },
        { name: 'al2', machineImage: ec2.MachineImage.latestAmazonLinux2() },
        { name: 'noble', machineImage: ec2.MachineImage.fromSsmParameter(UBUNTU_2404) },
        // arm64 (the parameter says so): arm64 instance types, or synth refuses the pool.
        { name: 'jammy', machineImage: ec2.MachineImage.resolveSsmParameterAtLaunch(UBUNTU_2204), instanceTypes: [new ec2.InstanceType('m7g.large')] },
        { name: 'debian', machineImage: ec2.MachineImage.fromSsmParameter('/aws/service/debian/release/12/latest/amd64') },
        { name: 'baked', machineImage: new ParameterMachineImage('/team/runner-ami', ec2.OperatingSystemType.LINUX, undefined, '/dev/xvda') },
      ]),
    ).toEqual({ al2023: '/dev/xvda', al2: '/dev/xvda', noble: '/dev/sda1', jammy: '/dev/sda1', debian: '/dev/xvda', baked: '/dev/xvda' });
  });

  it('is the pool prop for an image the construct cannot know, else the (deprecated) fleet prop, else /dev/xvda', () => {
    const generic = ec2.MachineImage.genericLinux({ 'us-east-1': 'ami-0123456789abcdef0' });
    const own = ec2.MachineImage.fromSsmParameter('/team/ubuntu-runner-ami');
    expect(knownRootDeviceName(generic)).toBeUndefined();
    expect(knownRootDeviceName(own)).toBeUndefined();
    expect(rootDevices([{ name: 'generic', machineImage: generic }, { name: 'own', machineImage: own, rootDeviceName: '/dev/sda1' }])).toEqual({
      generic: '/dev/xvda',
      own: '/dev/sda1',
    });
    // The fleet's value is the default of the pools that neither set theirs nor have a known image.
    expect(
      rootDevices(
        [
          { name: 'generic', machineImage: generic },
          { name: 'own', machineImage: own, rootDeviceName: '/dev/xvda' },
          { name: 'al2023', machineImage: ec2.MachineImage.latestAmazonLinux2023() },
        ],
        '/dev/sda1',
      ),
    ).toEqual({ generic: '/dev/sda1', own: '/dev/xvda', al2023: '/dev/xvda' });
  });

  it('refuses at synth a name that is no root device, and one that contradicts the known image, naming the pool', () => {
    expect(() => rootDevices([{ name: 'odd', machineImage: ec2.MachineImage.fromSsmParameter('/team/x'), rootDeviceName: 'sda1' }])).toThrow(
      /pools\[0\]\.rootDeviceName \(pool "odd"\) "sda1" is not a root device name of an EC2 image: use the image's RootDeviceName/,
    );
    expect(() => rootDevices([{ name: 'noble', machineImage: ec2.MachineImage.fromSsmParameter(UBUNTU_2404), rootDeviceName: '/dev/xvda' }])).toThrow(
      /pools\[0\]\.rootDeviceName \(pool "noble"\) "\/dev\/xvda" is not the root device of the pool's image \("\/dev\/sda1"\)/,
    );
  });
});
