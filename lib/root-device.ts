import * as ec2 from 'aws-cdk-lib/aws-ec2';
import { ParameterMachineImage } from './parameter-machine-image';
import type { RunnerPoolProps } from './props';

/**
 * The root device name of a pool's image: the launch template maps the pool's root volume
 * (`diskSize`, gp3, encrypted) to it. A name the image does not use is no error at launch: EC2
 * attaches a second, empty volume under that name and the root volume keeps the image's size
 * (Ubuntu's 8 GiB), so a job runs out of disk much later. Hence the image's own name where the
 * construct can know it.
 */
export const ROOT_DEVICE_DEFAULT = '/dev/xvda';

/**
 * Public SSM parameters of AMI ids, by prefix, and their images' root device names (as
 * DescribeImages reports them for these families: Amazon Linux and Debian `/dev/xvda`,
 * Canonical's Ubuntu `/dev/sda1`).
 */
const PARAMETER_ROOT_DEVICES: readonly (readonly [string, string])[] = [
  ['/aws/service/ami-amazon-linux-latest/', '/dev/xvda'],
  ['/aws/service/canonical/ubuntu/', '/dev/sda1'],
  ['/aws/service/debian/', '/dev/xvda'],
];

const ROOT_DEVICE_PATTERN = /^\/dev\/(?:xvd[a-z]|sd[a-z]1?|nvme0n1)$/;

/**
 * The root device name of `image` where the construct can know it without a lookup: Amazon
 * Linux images (`MachineImage.latestAmazonLinux2023()` and the like), a `ParameterMachineImage`
 * that says (`RunnerImage` builds on Amazon Linux 2023), an image from one of the public SSM
 * parameters above. Undefined otherwise (a generic AMI map, a lookup, a parameter of your own).
 */
export function knownRootDeviceName(image: ec2.IMachineImage): string | undefined {
  if (image instanceof ec2.AmazonLinuxImageSsmParameterBase || image instanceof ec2.AmazonLinuxImage) return '/dev/xvda';
  if (image instanceof ParameterMachineImage && image.rootDeviceName !== undefined) return image.rootDeviceName;
  const parameterName = (image as { parameterName?: unknown }).parameterName;
  if (typeof parameterName !== 'string') return undefined;
  return PARAMETER_ROOT_DEVICES.find(([prefix]) => parameterName.startsWith(prefix))?.[1];
}

/** The pool's root device name: its own prop, else its image's, else the fleet's, else `/dev/xvda`. */
export function poolRootDeviceName(pool: RunnerPoolProps, fleetDefault?: string): string {
  return pool.rootDeviceName ?? knownRootDeviceName(pool.machineImage) ?? fleetDefault ?? ROOT_DEVICE_DEFAULT;
}

/**
 * An actionable message when `name` is not a root device name EC2 images use, or not the one
 * the image is known to have (`known`); undefined when it can be used.
 */
export function rootDeviceNameProblem(name: string, known?: string): string | undefined {
  if (known !== undefined && name !== known) {
    return `rootDeviceName "${name}" is not the root device of the pool's image ("${known}"): the root volume would be a second, empty disk; leave rootDeviceName out, the image's is used`;
  }
  if (ROOT_DEVICE_PATTERN.test(name)) return undefined;
  return `rootDeviceName "${name}" is not a root device name of an EC2 image: use the image's RootDeviceName (aws ec2 describe-images --image-ids AMI --query 'Images[].RootDeviceName'), such as "/dev/xvda" (Amazon Linux, Debian) or "/dev/sda1" (Ubuntu)`;
}
