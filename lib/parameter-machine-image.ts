import * as ec2 from 'aws-cdk-lib/aws-ec2';
import type { Construct, IDependable } from 'constructs';
import type { RunnerPackage } from '../lambdas/shared/contract';
import type { RunnerImageArchitecture } from './image-architecture';

/**
 * An AMI id kept in an SSM parameter (data type `aws:ec2:image`), resolved at each launch
 * (`resolve:ssm:` in the launch template). A pool whose `machineImage` is one also evicts its
 * parked instances whose ImageId is no longer the parameter's value: a new image reaches the
 * warm pool although the launch template version does not change. `RunnerImage.machineImage()`
 * returns one; use it directly for an image parameter you publish yourself.
 */
export class ParameterMachineImage implements ec2.IMachineImage {
  /**
   * @param parameterName the SSM parameter holding the AMI id
   * @param os the image's operating system
   * @param creator what creates the parameter in the same app (RunnerImage's seed), if anything:
   *   a fleet whose pool uses this image is deployed after it, so no launch resolves a parameter
   *   that does not exist yet
   * @param rootDeviceName the root device name of the images the parameter names, when known
   *   (a pool then maps its root volume to it; lib/root-device.ts)
   * @param architecture the architecture of the images the parameter names, if known: the
   *   fleet then refuses, at synth, a pool whose instance types are of another architecture
   * @param runnerPackage the runner release baked into the images the parameter names, if
   *   known (`RunnerImage` sets it): a pool on it installs no runner, so it does not follow the
   *   newest release and its expiry alarm watches this version
   */
  constructor(
    readonly parameterName: string,
    private readonly os: ec2.OperatingSystemType = ec2.OperatingSystemType.LINUX,
    readonly creator?: IDependable,
    readonly rootDeviceName?: string,
    readonly architecture?: RunnerImageArchitecture,
    readonly runnerPackage?: RunnerPackage,
  ) {}

  getImage(scope: Construct): ec2.MachineImageConfig {
    return ec2.MachineImage.resolveSsmParameterAtLaunch(this.parameterName, { os: this.os }).getImage(scope);
  }
}
