import { Token } from 'aws-cdk-lib';
import * as ec2 from 'aws-cdk-lib/aws-ec2';

/** The CPU architecture a RunnerImage builds for. */
export enum RunnerImageArchitecture {
  /** x86_64 (Intel and AMD instance types). */
  X86_64 = 'x86_64',
  /** arm64 (Graviton instance types). */
  ARM64 = 'arm64',
}

/**
 * The architecture of an instance type by aws-cdk-lib's rule (`InstanceType.architecture`:
 * family "a", or a "g" among the letters after the generation, as in m7g, c7gn, t4g, im4gn,
 * is4gen, g5g), or undefined where that rule cannot tell: an unresolved token, a name it does
 * not parse (u-6tb1.metal), and Mac types (mac2 is Apple silicon, which the rule calls x86_64).
 */
export function instanceTypeArchitecture(type: ec2.InstanceType): RunnerImageArchitecture | undefined {
  const name = type.toString();
  if (Token.isUnresolved(name) || name.startsWith('mac')) return undefined;
  try {
    return type.architecture === ec2.InstanceArchitecture.ARM_64 ? RunnerImageArchitecture.ARM64 : RunnerImageArchitecture.X86_64;
  } catch {
    return undefined;
  }
}

/** AWS's public AMI parameters spell the architecture in their path: al2023-ami-kernel-default-arm64, ubuntu/.../amd64/... */
const PUBLIC_PARAMETER = /^\/aws\/service\//;
const ARCH_IN_PATH: readonly (readonly [RegExp, RunnerImageArchitecture])[] = [
  [/(^|[-/_])(x86_64|amd64)($|[-/_])/, RunnerImageArchitecture.X86_64],
  [/(^|[-/_])arm64($|[-/_])/, RunnerImageArchitecture.ARM64],
];

/**
 * The architecture of a machine image where the construct can know it without a lookup, else
 * undefined (then nothing is checked):
 * - an image that says so itself (`architecture`: `RunnerImage.machineImage()`, a
 *   `ParameterMachineImage` given one);
 * - an image resolved from one of AWS's public AMI parameters (`/aws/service/...`), whose name
 *   holds the architecture: `latestAmazonLinux2023({ cpuType })`, `fromSsmParameter` and
 *   `resolveSsmParameterAtLaunch` of such a name. A parameter of the team's own says nothing.
 */
export function machineImageArchitecture(image: ec2.IMachineImage): RunnerImageArchitecture | undefined {
  const own = (image as { architecture?: unknown }).architecture;
  if (own === RunnerImageArchitecture.X86_64 || own === RunnerImageArchitecture.ARM64) return own;
  const name = ssmParameterName(image);
  if (name === undefined || Token.isUnresolved(name) || !PUBLIC_PARAMETER.test(name)) return undefined;
  const found = ARCH_IN_PATH.filter(([pattern]) => pattern.test(name)).map(([, arch]) => arch);
  return found.length === 1 ? found[0] : undefined;
}

/**
 * The SSM parameter an image is read from: `parameterName` of GenericSSMParameterImage and
 * ResolveSsmParameterAtLaunchImage (public), or of the Amazon Linux images' props
 * (AmazonLinuxImageSsmParameterBase keeps them private: read defensively, a later aws-cdk-lib
 * that moves them only makes the architecture unknown).
 */
function ssmParameterName(image: ec2.IMachineImage): string | undefined {
  const direct = (image as { parameterName?: unknown }).parameterName;
  if (typeof direct === 'string') return direct;
  const props = (image as { props?: { parameterName?: unknown } }).props;
  return typeof props?.parameterName === 'string' ? props.parameterName : undefined;
}
