import { CreateTagsCommand, DeleteTagsCommand, type Tag } from '@aws-sdk/client-ec2';
import { GetParameterCommand, PutParameterCommand, type GetParameterCommandOutput } from '@aws-sdk/client-ssm';
import { errorName, READ, UnknownOutcomeError, WRITE_IDEMPOTENT, WRITE_ONCE } from '../shared/aws-call';
import { activationKeys, activationTags as activationTagsOf, encodeRunnerConfig, PARAMETER_INSTANCE_ARN_TAG, PARAMETER_INSTANCE_TAG, type RunnerConfigReuse, type RunnerRegistration } from '../shared/contract';
import { deleteRunnerConfigs } from '../shared/delete-configs';
import { ALL_STATES, describeFleet } from '../shared/instances';
import type { Logger } from '../shared/log';
import { deleteRunner, runnerConfigOf, type JobInFlight, type StepContext } from './context';
import { planRelease, retireInstance } from './retire';

/** Everything one activation attempt has done so far, so a rollback undoes exactly that. */
export interface Attempt {
  readonly j: JobInFlight;
  readonly instanceId: string;
  registration?: RunnerRegistration;
  /** The parameter holds our value (the claim succeeded). */
  claimed: boolean;
  /** The activation tags we wrote (sent, whatever the answer), with their values. */
  tags?: Tag[];
  /** A reusable pool's job: the config's `reuse` keys (decide.ts `reuseAffinityOf`; uses of the instance, 0 when fresh or cold). */
  reuse?: RunnerConfigReuse;
  /** The instance was picked from the job's affinity list (a reuse hit). */
  hit?: boolean;
  /** When the registration and the claim answered (the job's latency ledger). */
  registeredAt?: Date;
  claimedAt?: Date;
}

export type ClaimResult = 'claimed' | 'lost' | 'failed';

/**
 * The claim is a write that refuses to overwrite: PutParameter with Overwrite=false
 * succeeds for exactly one writer (ParameterAlreadyExists for every other), so decision
 * and claim are one atomic operation. The parameter is tagged with the instance id and the
 * instance ARN in the same call (tags are only accepted on creation, and a later tag call
 * would leave a window in which the instance cannot read its config): IAM compares the ARN
 * tag with `ec2:SourceInstanceARN` to let only that instance read and delete it.
 *
 * The warm path and the cold path both claim with the runner config itself: one SSM write
 * per activation. A warm job registers once and carries that registration past refused
 * claims (`activate.ts`), so lost claims cost no registrations (registering before every
 * claim and deleting on a loss made 826 registrations for 200 jobs in a held-out storm).
 *
 * A write whose outcome is unknown (timeout, 5xx) is not retried blindly, since a retry of
 * a write that did land would answer ParameterAlreadyExists and read as a lost claim while
 * leaving our parameter behind. It is resolved by reading the value back: ours (unique to
 * this attempt) means claimed. Not found is not "lost": a write still in flight can land
 * after the read, leaving a claim nobody owns on a parked instance until the sweep's
 * stale-claim (10 min). So the same value is sent again, and a refusal of it is read back
 * too, until an answer or a read settles it (at most `CLAIM_ROUNDS` sends).
 */
export async function claim(ctx: StepContext, a: Attempt, value: string, options: { paced?: boolean } = {}): Promise<ClaimResult> {
  for (let round = 1; ; round++) {
    const sent = await putClaim(ctx, a, value, round === 1 ? options : {});
    if (sent === 'claimed') return (a.claimed = true), 'claimed';
    // A refusal of the first send is the answer. A resend's says nothing of the earlier
    // write still unknown (refused as existing: that may be it; refused otherwise, e.g.
    // throttled past the retries: it may land yet): read it back as a lost answer.
    if (round === 1 && sent !== 'unknown') return sent;
    const seen = await readClaim(ctx, a, value);
    if (seen !== 'absent') return seen === 'ours' ? ((a.claimed = true), 'claimed') : seen;
    // Not there (yet): the write may still land, after this read, and leave a claim nobody
    // owns until the sweep. Sending the same value again settles it: refused means it is
    // there now (read back: ours or not); accepted means this one is ours. Only after the
    // last round, every answer lost and every read empty, is the instance given up.
    if (round >= CLAIM_ROUNDS) {
      a.j.log.error('claim outcome unknown after every resend; a late write is left to the sweep', { instanceId: a.instanceId, rounds: round });
      return 'failed';
    }
  }
}

/** Sends of one claim while its answers are lost and its read-backs find nothing. */
const CLAIM_ROUNDS = 3;

async function putClaim(ctx: StepContext, a: Attempt, value: string, options: { paced?: boolean }): Promise<'claimed' | 'lost' | 'failed' | 'unknown'> {
  try {
    await ctx.aws.send(
      ctx.ssm,
      new PutParameterCommand({
        Name: ctx.paths.runnerConfig(a.instanceId),
        Value: value,
        Type: 'SecureString',
        ...(ctx.config.parameters.kmsKeyId ? { KeyId: ctx.config.parameters.kmsKeyId } : {}),
        Overwrite: false,
        Tags: [
          { Key: PARAMETER_INSTANCE_TAG, Value: a.instanceId },
          { Key: PARAMETER_INSTANCE_ARN_TAG, Value: ctx.instanceArn(a.instanceId) },
        ],
      }),
      WRITE_ONCE,
      options,
    );
    return 'claimed';
  } catch (error) {
    if (error instanceof UnknownOutcomeError) return 'unknown';
    // Refused: someone's parameter is there. After a lost answer that someone may be us.
    if (errorName(error) === 'ParameterAlreadyExists') return 'lost';
    a.j.log.error('claim write failed', { instanceId: a.instanceId, error: errorName(error) });
    return 'failed';
  }
}

/** The claim read back after a lost answer: ours (the value is unique to the attempt), another's, absent, or unreadable. */
async function readClaim(ctx: StepContext, a: Attempt, value: string): Promise<'ours' | 'lost' | 'absent' | 'failed'> {
  try {
    const out = await ctx.aws.send<GetParameterCommandOutput>(ctx.ssm, new GetParameterCommand({ Name: ctx.paths.runnerConfig(a.instanceId), WithDecryption: true }), READ);
    const ours = out.Parameter?.Value === value;
    a.j.log.warn('claim outcome unknown, resolved by reading it back', { instanceId: a.instanceId, claimed: ours });
    return ours ? 'ours' : 'lost';
  } catch (readError) {
    if (errorName(readError) === 'ParameterNotFound') return 'absent';
    a.j.log.warn('claim outcome unknown and unreadable', { instanceId: a.instanceId, error: errorName(readError) });
    return 'failed';
  }
}

/** The encoded runner config of the attempt's registration (the cold path claims with it directly: no contention on its own new instance). */
export function configValue(ctx: StepContext, a: Attempt): string {
  return encodeRunnerConfig(runnerConfigOf(ctx.config, a.j.job, a.registration!, a.instanceId, a.reuse));
}

/**
 * The activation tags (the contract's): per-instance values, so one CreateTags per instance
 * carries them all, with the job's affinity for a reusable pool's job: only scale-up writes it.
 */
export function activationTags(ctx: StepContext, a: Attempt, activatedAt: Date): Tag[] {
  return activationTagsOf(ctx.keys, a.j.job, a.registration!.runnerId, activatedAt, a.reuse?.affinity);
}

export async function tag(ctx: StepContext, a: Attempt, activatedAt: Date): Promise<void> {
  a.tags = activationTags(ctx, a, activatedAt);
  await ctx.aws.send(ctx.ec2, new CreateTagsCommand({ Resources: [a.instanceId], Tags: a.tags }), WRITE_IDEMPOTENT);
}

/**
 * Undoes what `a` did, newest first: the activation tags (deleted only where they still
 * hold our values, so another owner's tags survive), the CI registration, and last the
 * parameter, which releases the claim only once nothing of ours is left on the instance.
 * Tags that stay (the delete fails, or a late CreateTags keeps landing) would make a parked
 * standby look activated to everyone: the instance is terminated instead (`planRelease`),
 * and the claim released once it is on its way out; if it cannot be, the claim stays so no
 * other job takes a half-activated instance, and the sweep removes both.
 * A started instance that loses its parameter and tags boots as an unactivated warm
 * standby (PRIME) and parks again. Never throws: each failure is logged and counted, and
 * the scale-down sweeps remove what is left.
 */
export async function rollback(ctx: StepContext, a: Attempt, reason: string): Promise<void> {
  const log = a.j.log.child({ instanceId: a.instanceId, rollback: reason });
  const tagsLeft = a.tags !== undefined && !(await removeTags(ctx, a, log));
  const plan = planRelease(tagsLeft, a.claimed, reason);
  let complete = plan === 'release';
  let release = true;
  if (plan === 'retire') {
    complete = await retireInstance(ctx, a.instanceId, log);
    release = complete;
    if (complete) log.warn('activation tags could not be removed: the instance is terminated instead, the pool refills');
    else log.error('activation tags could not be removed nor the instance terminated: the claim stays for the sweep');
  }
  if (a.registration) {
    if (!(await deleteRunner(ctx, a.j, a.registration.runnerId))) complete = false;
  }
  if (a.claimed && release && !(await releaseClaim(ctx, a, log))) complete = false;
  log.warn('activation rolled back', { complete });
  if (!complete) ctx.metrics.add(ctx.config.metrics.names.jobsFailed, { Pool: a.j.pool.name, Reason: 'rollback-incomplete' });
}

/**
 * Deletes the claim parameter; false when it may still be there. Sent once (a lost answer
 * is read back, never resent): a delete that landed released the instance, and a resend
 * would delete the next claim on it. Not found: the instance read and deleted it already
 * (it booted into RUN).
 */
async function releaseClaim(ctx: StepContext, a: Attempt, log: Logger): Promise<boolean> {
  const name = ctx.paths.runnerConfig(a.instanceId);
  const outcome = await deleteRunnerConfigs(ctx.aws, ctx.ssm, ctx.paths, [name], { delete: 'single', readBack: 'get' });
  if (!outcome.kept.has(name)) return true;
  log.error('deleting the config parameter failed', { error: outcome.errors.join(', ') });
  return false;
}

/** Rounds of delete-then-look before the instance is retired instead (`rollback`). */
const TAG_REMOVAL_ROUNDS = 3;

/**
 * Removes our activation tags and looks that they are gone. A CreateTags whose answer was
 * lost (or an earlier attempt of one that was retried) can land after the DeleteTags: the
 * instance would then look activated to everyone, with no owner to start it. So the
 * rollback describes the instance after deleting, and deletes again while any of our tags
 * (key and our value) is still there, before the claim is released, so the instance is
 * claimable again at once. A delete that failed or lost every answer is looked at too (it
 * may have landed); false when our tags may still be there.
 */
async function removeTags(ctx: StepContext, a: Attempt, log: Logger): Promise<boolean> {
  // Never the affinity: an instance that may have run our job keeps the affinity it ran it
  // under (a fresh one can then serve that affinity alone; its boot accepts it with uses 0).
  const removable = new Set(activationKeys(ctx.keys));
  const ours = a.tags!.filter((t) => removable.has(t.Key!));
  for (let round = 1; round <= TAG_REMOVAL_ROUNDS; round++) {
    let deleted = true;
    try {
      await ctx.aws.send(ctx.ec2, new DeleteTagsCommand({ Resources: [a.instanceId], Tags: ours }), WRITE_IDEMPOTENT);
    } catch (error) {
      deleted = false;
      log.error('removing activation tags failed; looking whether they are gone', { round, error: errorName(error) });
    }
    const left = await tagsLeft(ctx, a.instanceId, ours, log);
    if (left?.length === 0) return true;
    if (left === undefined || !deleted) return false;
    log.warn('activation tags landed after their removal; removing them again', { round, tags: left.map((t) => t.Key!) });
  }
  return false;
}

/** Our tags (key and our value) still on the instance; undefined when it cannot be observed. */
async function tagsLeft(ctx: StepContext, instanceId: string, ours: readonly Tag[], log: Logger): Promise<Tag[] | undefined> {
  try {
    const [seen] = await describeFleet(ctx.aws, ctx.ec2, ctx.keys, { instanceIds: [instanceId], states: ALL_STATES });
    return ours.filter((t) => seen !== undefined && seen.tags.get(t.Key!) === t.Value);
  } catch (error) {
    log.error('looking at the activation tags failed', { error: errorName(error) });
    return undefined;
  }
}
