import { assertPrefix } from './names';

/**
 * Every tag the control plane and the boot script agree on. The keys are derived from
 * the fleet prefix here and nowhere else; the boot script receives them by rendering.
 */
export interface TagKeys {
  /** Pool the instance belongs to (value: pool name). */
  readonly pool: string;
  /** Present with value "true" on instances launched as warm standbys by the pool Lambda. */
  readonly warmStandby: string;
  /** ISO 8601 UTC time the instance was activated for a job (set by scale-up). */
  readonly activatedAt: string;
  /** Trace id of the job the instance serves, born at the webhook. */
  readonly traceId: string;
  /** Provider-qualified job id (see `qualifiedJobId`). */
  readonly jobId: string;
  /** Runner id at the CI provider. */
  readonly runnerId: string;
  /** Which component created the instance (value: one of `CREATED_BY`). */
  readonly createdBy: string;
  /**
   * ISO 8601 UTC time the instance's runner took its job. Written by the instance itself (the
   * boot script, through CreateTags on its own instance only); the idle rule never reclaims
   * an instance that carries it.
   */
  readonly jobStarted: string;
  /**
   * ISO 8601 UTC time a scale-down sweep first read the instance's runner as idle past the
   * idle timeout; cleared by a sweep that reads it working. The idle rule acts only on a
   * second idle reading at least the pool's idle confirmation later.
   */
  readonly idleSince: string;
  /** Why a warm standby failed to prime, as the pool saw it (set on the instance it evicts for that). */
  readonly primeFailure: string;
  /**
   * Why a cold launch failed before its runner started: written by the instance itself
   * (the boot script, on its own instance only) just before it terminates itself. The pool
   * counts these into the pool's prime streak, so cold and warm failures share one bound.
   */
  readonly startFailure: string;
  /**
   * The ClientToken of the pool launch that created a warm standby: a launch whose answer
   * was lost is found by it (moto does not filter on `client-token`; EC2 and moto both filter on tags).
   */
  readonly launchToken: string;
  /**
   * Reuse (contract reuse.ts): the trust key (`affinityOf`) of the caches a parked instance
   * carries, written by the instance itself when it parks after a job; never removed while
   * the caches exist. An instance with it is offered only jobs of the same affinity.
   */
  readonly affinity: string;
  /** Reuse: jobs the instance has served, written by the instance with `affinity` when it parks. */
  readonly uses: string;
  /**
   * Reuse: `encodeParking(activatedAt, since)`, written by the instance when its runner ended
   * and it cleans to park, and by the scale-down's idle-stop just before it deregisters the
   * runner (so no sweep reads the deregistered runner as a finished job and terminates the
   * instance in between). The sweep leaves the activation it names alone for
   * `REUSE_DEFAULTS.parkSeconds`; one naming another activation is ignored.
   */
  readonly parking: string;
  /**
   * The runner release version the instance installed (contract runner-release.ts), written by
   * the instance itself after its install step; the pool replaces a parked instance of a pool
   * that follows the newest release whose tag names another version. An instance whose image
   * had the runner (nothing installed) has none and is never replaced for it.
   */
  readonly runnerVersion: string;
}

export const TAG_NAMES = {
  pool: 'pool',
  warmStandby: 'warm-standby',
  activatedAt: 'activated-at',
  traceId: 'trace-id',
  jobId: 'job-id',
  runnerId: 'runner-id',
  createdBy: 'created-by',
  jobStarted: 'job-started',
  idleSince: 'idle-since',
  primeFailure: 'prime-failure',
  startFailure: 'start-failure',
  launchToken: 'launch-token',
  affinity: 'affinity',
  uses: 'uses',
  parking: 'parking',
  runnerVersion: 'runner-version',
} as const satisfies Record<keyof TagKeys, string>;

/** Values of the created-by tag. */
export const CREATED_BY = {
  pool: 'pool',
  scaleUp: 'scale-up',
} as const;
export type CreatedBy = (typeof CREATED_BY)[keyof typeof CREATED_BY];

export const WARM_STANDBY_VALUE = 'true';

/**
 * EC2 adds this tag to instances launched from a launch template; the pool evicts
 * parked instances built from an older version.
 */
export const LAUNCH_TEMPLATE_VERSION_TAG = 'aws:ec2launchtemplate:version';

/** Tag keys are `<prefix>:<name>`: ":" is allowed in instance-metadata tag keys, "/" is not. */
export function tagKeys(prefix: string): TagKeys {
  assertPrefix(prefix);
  const keys = {} as Record<keyof TagKeys, string>;
  for (const [field, name] of Object.entries(TAG_NAMES) as [keyof TagKeys, string][]) {
    keys[field] = `${prefix}:${name}`;
  }
  return keys;
}
