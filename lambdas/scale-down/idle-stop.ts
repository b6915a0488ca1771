import { CreateTagsCommand, type EC2Client } from '@aws-sdk/client-ec2';
import { PutParameterCommand, type SSMClient } from '@aws-sdk/client-ssm';
import { errorName, UnknownOutcomeError, WRITE_IDEMPOTENT, WRITE_ONCE, type AwsCaller } from '../shared/aws-call';
import { encodeParking, PARAMETER_INSTANCE_TAG, type CiProvider, type Provider, type SsmPaths, type TagKeys } from '../shared/contract';
import { deleteRunnerConfigs } from '../shared/delete-configs';
import { ALL_STATES, describeFleet, type ObservedInstance } from '../shared/instances';
import { activationTime, reportedStart } from '../shared/job-report';
import type { Logger } from '../shared/log';
import { idleStopMarker, listRunnerConfigs } from '../shared/parameters';
import { deregisterIdleRunner, logKept } from './pause-first';
import type { IdleStop } from './sweep';

/**
 * Idle-stop (contract reuse.ts; docs/control-plane.md "Idle-stop"): an idle runner of a
 * reusable pool is deregistered instead of having its instance terminated; the runner then
 * exits and the instance cleans itself and parks with its caches. It is decided under a
 * claim of its own, on what is observed after the claim, never while a job runs:
 * 1. claim: the idle-stop marker at the instance's config name, Overwrite=false (a job claim,
 *    an eviction and another sweep's idle-stop exclude it; a lost answer is resolved by listing);
 * 2. observe again: the instance, by id; `idleStopVerdict` decides;
 * 3. tag `parking` for this activation, so that no sweep reclaims the instance as "runner gone"
 *    between the deregistration and the instance's own parking tag;
 * 4. deregister the runner: the sweep's idle deregistration, whose provider reading is the last
 *    (GitHub refuses to delete a busy runner; a GitLab runner is paused, then asked for jobs);
 * 5. remove the marker, on every path (a lost answer, a thrown error, a claim not known to be held).
 */
export interface IdleStopDeps {
  readonly ec2: EC2Client;
  readonly ssm: SSMClient;
  readonly aws: AwsCaller;
}

export interface IdleStopContext {
  readonly paths: SsmPaths;
  readonly keys: TagKeys;
  readonly providers: Partial<Record<Provider, CiProvider>>;
  readonly ciTimeoutMs: number;
  readonly now: () => Date;
  readonly log: Logger;
}

/** Why an instance observed again after the claim is not idle-stopped. */
export type IdleStopRefusal = 'gone' | 'not-running' | 'other-activation' | 'job-started' | 'parking';

/**
 * Whether the instance, observed again under the claim, is still the idle one the sweep read:
 * running, the same activation and runner, no job reported for this activation (R3: a report
 * of an earlier one does not count), not parking already (its runner ended on its own).
 */
export function idleStopVerdict(planned: ObservedInstance, fresh: ObservedInstance | undefined, keys: TagKeys, now: Date): { go: true } | { go: false; why: IdleStopRefusal } {
  if (!fresh) return { go: false, why: 'gone' };
  if (fresh.state !== 'running') return { go: false, why: 'not-running' };
  const activation = planned.tags.get(keys.activatedAt);
  if (activation === undefined || fresh.tags.get(keys.activatedAt) !== activation || fresh.tags.get(keys.runnerId) !== planned.tags.get(keys.runnerId)) {
    return { go: false, why: 'other-activation' };
  }
  if (reportedStart(fresh, keys, activationTime(fresh, keys), now) !== undefined) return { go: false, why: 'job-started' };
  if (fresh.tags.get(keys.parking)?.startsWith(`${activation} `)) return { go: false, why: 'parking' };
  return { go: true };
}

/** Idle-stops the planned instances one by one; how many runners were deregistered. A failure of one is logged, the next is tried. */
export async function idleStopAll(deps: IdleStopDeps, ctx: IdleStopContext, planned: readonly IdleStop[], count: (pool: string) => void): Promise<number> {
  let stopped = 0;
  for (const s of planned) {
    const fields = { instanceId: s.instance.id, runnerId: s.runner.runnerId, traceId: s.instance.tags.get(ctx.keys.traceId) };
    try {
      if (await idleStop(deps, ctx, s)) {
        stopped++;
        count(s.instance.tags.get(ctx.keys.pool) ?? 'unknown');
      }
    } catch (error) {
      ctx.log.warn('idle-stop failed; the next sweep reads the instance again', { ...fields, error: errorName(error) });
    }
  }
  return stopped;
}

/** One idle-stop under its marker (module comment); true when the runner was deregistered. */
async function idleStop(deps: IdleStopDeps, ctx: IdleStopContext, s: IdleStop): Promise<boolean> {
  const { keys, log } = ctx;
  const ci = ctx.providers[s.runner.provider];
  const activation = s.instance.tags.get(keys.activatedAt);
  if (!ci || activation === undefined) return false;
  const fields = { instanceId: s.instance.id, runnerId: s.runner.runnerId, traceId: s.instance.tags.get(keys.traceId), jobId: s.instance.tags.get(keys.jobId) };
  const marker = { name: ctx.paths.runnerConfig(s.instance.id), value: idleStopMarker(activation, s.instance.tags.get(keys.jobId) ?? '-') };
  const claim = await claimMarker(deps, ctx, s.instance.id, marker);
  try {
    if (claim !== 'held') {
      log.info('not idle-stopping: the instance is claimed (a job, an eviction or another sweep), or the claim is unknown', { ...fields, claim });
      return false;
    }
    const [fresh] = await describeFleet(deps.aws, deps.ec2, keys, { instanceIds: [s.instance.id], states: ALL_STATES });
    const verdict = idleStopVerdict(s.instance, fresh, keys, ctx.now());
    if (!verdict.go) {
      log.info('not idle-stopping: the instance changed since the reading', { ...fields, why: verdict.why });
      return false;
    }
    const parking = encodeParking(activation, ctx.now());
    await deps.aws.send(deps.ec2, new CreateTagsCommand({ Resources: [s.instance.id], Tags: [{ Key: keys.parking, Value: parking }] }), WRITE_IDEMPOTENT);
    const outcome = await deregisterIdleRunner(ci, s.runner.runnerId, ctx.ciTimeoutMs);
    if (!outcome.deleted) {
      // The parking tag stays: it keeps the sweep's rules away for parkSeconds at most (a delay, never a stop).
      logKept(log, outcome, { ...fields, reason: 'idle-stop' });
      return false;
    }
    log.info('idle-stopped', { ...fields, pool: s.instance.tags.get(keys.pool), reason: 'idle' });
    return true;
  } finally {
    await releaseMarker(deps, ctx, s.instance.id, marker, claim);
  }
}

type Claim = 'held' | 'refused' | 'unknown';
interface Marker {
  readonly name: string;
  readonly value: string;
}

/**
 * The marker write with Overwrite=false. A lost answer may have landed: listing decides (a
 * String marker is readable there), and only this run's own value is held; when listing fails
 * too, the claim is unknown: nothing is done, and the marker, if it landed, is removed anyway.
 */
async function claimMarker(deps: IdleStopDeps, ctx: IdleStopContext, instanceId: string, marker: Marker): Promise<Claim> {
  try {
    await deps.aws.send(
      deps.ssm,
      new PutParameterCommand({ Name: marker.name, Value: marker.value, Type: 'String', Overwrite: false, Tags: [{ Key: PARAMETER_INSTANCE_TAG, Value: instanceId }] }),
      WRITE_ONCE,
    );
    return 'held';
  } catch (error) {
    if (!(error instanceof UnknownOutcomeError)) return 'refused';
    const held = await ownMarker(deps, ctx, marker);
    ctx.log.warn('idle-stop claim outcome unknown, resolved by listing', { instanceId, held });
    return held === 'unreadable' ? 'unknown' : held ? 'held' : 'refused';
  }
}

/** Whether the config name holds this run's marker now, by listing; `unreadable` when listing failed. */
async function ownMarker(deps: IdleStopDeps, ctx: IdleStopContext, marker: Marker): Promise<boolean | 'unreadable'> {
  try {
    return (await listRunnerConfigs(deps.aws, deps.ssm, ctx.paths)).some((p) => p.name === marker.name && p.markerValue === marker.value);
  } catch {
    return 'unreadable';
  }
}

/**
 * Removes the marker on every path. Deleting by name is safe only while the name holds this
 * run's marker (after a refusal it holds someone else's claim): a held claim is ours until we
 * delete it; an unknown one is listed first. A delete whose answer was lost is read back by
 * listing (`deleteRunnerConfigs`), and one that did not happen is tried once more. What is left
 * (listing failed) is removed by a later sweep after IDLE_STOP_LEFTOVER_MS.
 */
async function releaseMarker(deps: IdleStopDeps, ctx: IdleStopContext, instanceId: string, marker: Marker, claim: Claim): Promise<void> {
  if (claim === 'refused') return;
  for (let attempt = 0; attempt < 2; attempt++) {
    const ours = attempt === 0 && claim === 'held' ? true : await ownMarker(deps, ctx, marker);
    if (ours === false) return;
    if (ours === 'unreadable') break;
    const outcome = await deleteRunnerConfigs(deps.aws, deps.ssm, ctx.paths, [marker.name], { delete: 'batch', readBack: 'list' });
    if (outcome.gone.has(marker.name)) return;
  }
  ctx.log.error('the idle-stop marker may be left; a later sweep removes it', { instanceId });
}
