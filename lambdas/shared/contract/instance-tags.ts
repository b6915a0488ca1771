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
 * tag: the boot script must not take it for a standby. A reusable pool's launch carries the
 * job's affinity: only the control plane writes it (the instance role cannot), and the
 * instance parks only under the affinity its tag names.
 */
export function coldLaunchTags(keys: TagKeys, pool: string, job: JobTagValues, launchedAt: Date, launchToken: string, affinity?: string): InstanceTag[] {
  return [
    { Key: keys.pool, Value: pool },
    { Key: keys.createdBy, Value: CREATED_BY.scaleUp },
    { Key: keys.jobId, Value: job.jobId },
    { Key: keys.traceId, Value: job.traceId },
    { Key: keys.activatedAt, Value: launchedAt.toISOString() },
    { Key: keys.launchToken, Value: launchToken },
    ...affinityTag(keys, affinity),
  ];
}

/**
 * What scale-up adds to a parked standby it activates (one CreateTags per instance), with
 * the job's affinity for a reusable pool (see `coldLaunchTags`). A rollback removes only
 * `activationKeys`: the affinity stays, so a fresh standby whose activation is rolled back
 * can serve that affinity alone (never another's jobs with its data).
 */
export function activationTags(keys: TagKeys, job: JobTagValues, runnerId: string, activatedAt: Date, affinity?: string): InstanceTag[] {
  return [
    { Key: keys.activatedAt, Value: activatedAt.toISOString() },
    { Key: keys.traceId, Value: job.traceId },
    { Key: keys.jobId, Value: job.jobId },
    { Key: keys.runnerId, Value: runnerId },
    ...affinityTag(keys, affinity),
  ];
}

/** The activation's own keys: what a rollback of an activation may remove (never the affinity). */
export function activationKeys(keys: TagKeys): string[] {
  return [keys.activatedAt, keys.traceId, keys.jobId, keys.runnerId];
}

function affinityTag(keys: TagKeys, affinity: string | undefined): InstanceTag[] {
  return affinity === undefined ? [] : [{ Key: keys.affinity, Value: affinity }];
}
