import { CREATED_BY, WARM_STANDBY_VALUE, type TagKeys } from './tags';

/** One EC2 tag as the launch and tag calls send it. */
export interface InstanceTag {
  readonly Key: string;
  readonly Value: string;
}

/** What a job carries onto the instance that serves it. */
export interface JobTagValues {
  readonly jobId: string;
  readonly traceId: string;
}

/**
 * The tags each launch path sets, defined once: the Lambdas send these, and the boot-script
 * tests boot instances carrying exactly these (test/templates/launch-tags.ts), so a tag that
 * changes here changes what the tests see.
 */

/**
 * A warm standby, as the pool launches it (RunInstances). `launchToken` is the launch's
 * ClientToken: a launch whose answer was lost is found by it.
 */
export function standbyLaunchTags(keys: TagKeys, pool: string, launchToken: string): InstanceTag[] {
  return [
    { Key: keys.pool, Value: pool },
    { Key: keys.warmStandby, Value: WARM_STANDBY_VALUE },
    { Key: keys.createdBy, Value: CREATED_BY.pool },
    { Key: keys.launchToken, Value: launchToken },
  ];
}

/**
 * A cold launch, as scale-up launches it (CreateFleet). It carries the activation time too,
 * which makes it "activated" for the sweeps and the latency line, but never the warm-standby
 * tag: the boot script must not take it for a standby.
 */
export function coldLaunchTags(keys: TagKeys, pool: string, job: JobTagValues, launchedAt: Date, launchToken: string): InstanceTag[] {
  return [
    { Key: keys.pool, Value: pool },
    { Key: keys.createdBy, Value: CREATED_BY.scaleUp },
    { Key: keys.jobId, Value: job.jobId },
    { Key: keys.traceId, Value: job.traceId },
    { Key: keys.activatedAt, Value: launchedAt.toISOString() },
    { Key: keys.launchToken, Value: launchToken },
  ];
}

/** What scale-up adds to a parked standby it activates (one CreateTags per instance). */
export function activationTags(keys: TagKeys, job: JobTagValues, runnerId: string, activatedAt: Date): InstanceTag[] {
  return [
    { Key: keys.activatedAt, Value: activatedAt.toISOString() },
    { Key: keys.traceId, Value: job.traceId },
    { Key: keys.jobId, Value: job.jobId },
    { Key: keys.runnerId, Value: runnerId },
  ];
}
