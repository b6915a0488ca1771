import type * as ec2 from 'aws-cdk-lib/aws-ec2';
import { DEFAULT_RUNNER_PACKAGES, Provider, RUNNER_VERSION_LATEST, type RunnerPackage } from '../lambdas/shared/contract';
import { ParameterMachineImage } from './parameter-machine-image';

/**
 * Which runner release a pool installs on an image without a runner (docs/operations.md,
 * "Runner updates"): the newest release, resolved by the control plane on a schedule, or a pin
 * (the pool's `runnerPackage`, else the library's).
 */
export class RunnerVersion {
  /**
   * Follow the newest release: a Lambda resolves it hourly from GitHub's or GitLab's release data
   * (checksums included), the boot installs it, and parked instances of an older version are
   * replaced a few at a time. Cannot be combined with `runnerPackage`. The default of GitHub
   * pools; a GitLab pool follows only when this is set (gitlab-runner must suit the server).
   */
  static latest(): RunnerVersion {
    return new RunnerVersion(true);
  }

  /**
   * The pool's `runnerPackage`, or the library's pinned release: nothing changes until the pin
   * is changed. GitHub refuses a runner 30 days after a newer release came out; an alarm warns
   * 7 days before.
   */
  static pinned(): RunnerVersion {
    return new RunnerVersion(false);
  }

  private constructor(
    /** True when the pool follows the newest release. */
    readonly followsLatest: boolean,
  ) {}
}

/** The pool props runner updates read. */
export interface RunnerVersionInput {
  readonly name: string;
  readonly provider: Provider;
  readonly runnerVersion?: RunnerVersion;
  readonly runnerPackage?: RunnerPackage;
  readonly machineImage?: ec2.IMachineImage;
}

/** The runner release the pool's image carries, when the construct knows it (a `RunnerImage`'s). */
export function bakedRunnerPackage(pool: RunnerVersionInput): RunnerPackage | undefined {
  return pool.machineImage instanceof ParameterMachineImage ? pool.machineImage.runnerPackage : undefined;
}

/**
 * Whether the pool follows the newest release. The default: a GitHub pool follows it unless it
 * pins a `runnerPackage` (a fleet on the library's pin would stop receiving GitHub jobs 30 days
 * after GitHub's next release unless someone upgraded the library in time); a GitLab pool keeps
 * its pin, because gitlab-runner must stay compatible with the GitLab server's version (a
 * self-managed one may be behind), and GitLab refuses no older runner.
 */
export function followsLatestRunner(pool: RunnerVersionInput, where: (field: string) => string = (field) => `${field} (pool "${pool.name}")`): boolean {
  // An image with the runner baked in installs none at boot: nothing to follow (runnerVersionWarnings).
  if (bakedRunnerPackage(pool) !== undefined) return false;
  if (pool.runnerVersion?.followsLatest && pool.runnerPackage !== undefined) {
    throw new Error(
      `${where('runnerVersion')} is RunnerVersion.latest() and runnerPackage pins ${pool.runnerPackage.version}, which contradict each other: drop runnerPackage to follow the newest release, or use RunnerVersion.pinned()`,
    );
  }
  return pool.runnerVersion?.followsLatest ?? (pool.provider === Provider.GITHUB && pool.runnerPackage === undefined);
}

/** The pool's `runnerVersion` in the FleetConfig: "latest", or the pinned version (the image's, when it carries the runner). */
export function runnerVersionConfig(pool: RunnerVersionInput): string {
  if (followsLatestRunner(pool)) return RUNNER_VERSION_LATEST;
  return (bakedRunnerPackage(pool) ?? pool.runnerPackage ?? DEFAULT_RUNNER_PACKAGES[pool.provider]).version;
}

/** Synth warnings: `RunnerVersion.latest()` on a pool whose image carries its runner, which nothing then updates. */
export function runnerVersionWarnings(pools: readonly RunnerVersionInput[]): string[] {
  return pools.flatMap((pool, i) => {
    const baked = bakedRunnerPackage(pool);
    if (!baked || !pool.runnerVersion?.followsLatest) return [];
    return [
      `pools[${i}].runnerVersion (pool "${pool.name}") RunnerVersion.latest() has no effect on a RunnerImage, which carries runner ${baked.version}: the pool runs that version until the image is rebuilt with another runnerPackage (docs/operations.md, "Runner updates")`,
    ];
  });
}
