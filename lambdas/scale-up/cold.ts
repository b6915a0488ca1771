import {
  CreateFleetCommand,
  CreateTagsCommand,
  TerminateInstancesCommand,
  type CreateFleetCommandOutput,
  type DefaultTargetCapacityType,
  type _InstanceType,
  type Tag,
} from '@aws-sdk/client-ec2';
import { errorName, mapLimit, UnknownOutcomeError, WRITE_IDEMPOTENT, WRITE_ONCE } from '../shared/aws-call';
import { settleLaunch } from '../shared/launch-outcome';
import { describeFleet } from '../shared/instances';
import { deleteRunnerConfigs } from '../shared/delete-configs';
import { coldLaunchTags, type PoolConfig } from '../shared/contract';
import type { Carried } from './activate';
import { claim, configValue, type Attempt } from './claim';
import { createRunner, deleteRunner, ROLLBACK_INCOMPLETE, type JobInFlight, type StepContext } from './context';
import { adoptWindowSeconds, earlierLaunch, earlierLaunchTokens, earlierLiveSeconds, launchToken, type LaunchAttempt } from './cold-tokens';

/** CreateFleet error codes that mean "no capacity of this kind now", worth trying on-demand. */
const CAPACITY_ERRORS = new Set([
  'InsufficientInstanceCapacity',
  'InsufficientCapacity',
  'SpotMaxPriceTooLow',
  'MaxSpotInstanceCountExceeded',
  'UnfulfillableCapacity',
  'InsufficientFreeAddressesInSubnet',
]);

export class ColdLaunchError extends Error {
  constructor(
    message: string,
    readonly step: 'launch' | 'register' | 'config' | 'tag',
  ) {
    super(message);
    this.name = 'ColdLaunchError';
  }
}

/**
 * The launch is known not to have happened: EC2 answered and launched nothing. Only then may
 * its launch ticket be given back; a lost answer, or a failure after the launch, keeps it.
 */
export function launchRefused(error: unknown): boolean {
  return error instanceof ColdLaunchError && error.step === 'launch';
}

/**
 * Every send of the launch lost its answer and its token found nothing: it may still land.
 * Its message comes back soon (`UNKNOWN_LAUNCH_REDELIVERY_SECONDS`), while a late instance can
 * still be taken over.
 */
export function launchUnknown(error: unknown): boolean {
  return error instanceof UnknownOutcomeError;
}

export interface ColdResult {
  readonly instanceId: string;
  readonly runnerId: string;
  readonly capacityType: DefaultTargetCapacityType;
  /** Spot was asked for but had no capacity: the launch fell back to on-demand. */
  readonly spotFallback: boolean;  /** When CreateFleet answered, the registration answered, and the config and runner id tag were in place (the job's latency ledger). */
  readonly stages: { readonly launchedAt: Date; readonly registeredAt: Date; readonly startedAt: Date };
}

/**
 * A cold launch: CreateFleet (instant) from the pool's launch template over its instance
 * types and subnets, tagged with the job id and trace id at launch; then the runner
 * registration and the config parameter the new instance (booting into WAIT) polls for;
 * then the runner id tag. The runner id tag comes last: it marks the job as served. A job
 * that fell back from the warm path brings the registration its refused claims carried
 * (`Carried`): the cold launch uses it instead of registering again.
 *
 * CreateFleet's ClientToken makes a retried call return the same fleet; the token names
 * the message and its receive count (cold-tokens.ts). A redelivery first looks for a live
 * instance an earlier receive launched and never gave a runner (its answer, or the look-up
 * by its token, was lost: `lookUpEarlier`, before the cold gate) and takes it over (`earlier`);
 * otherwise it launches anew.
 * On any failure after the launch, the instance is terminated and the registration
 * deleted (nothing of it serves the job), and the error reaches the caller.
 */
export async function launchCold(ctx: StepContext, j: JobInFlight, attempt: LaunchAttempt, carried?: Carried, earlier?: ColdFleet): Promise<ColdResult> {
  const launchedAt = ctx.now();
  let fleet: ColdFleet;
  try {
    fleet = earlier ?? (await createFleet(ctx, j, launchedAt, attempt));
  } catch (error) {
    // The registration carried from a refused warm claim serves nothing now.
    if (carried) await dropCarried(ctx, [j], new Map([[j.key, carried]]), 1);
    // An answer that refused (an EC2 error code) launched nothing: say so (`launchRefused`).
    // A lost answer may have launched, and stays what it is.
    if (error instanceof ColdLaunchError || error instanceof UnknownOutcomeError) throw error;
    throw new ColdLaunchError(`CreateFleet refused: ${errorName(error)}`, 'launch');
  }
  const { instanceId, capacityType, spotFallback } = fleet;
  const launched = fleet.launchedAt ?? ctx.now();
  const a: Attempt = {
    j,
    instanceId,
    claimed: false,
    // A reusable pool's cold instance serves its job as a fresh one would, and may park after it.
    ...(j.affinity !== undefined ? { reuse: { affinity: j.affinity, uses: 0 }, hit: false } : {}),
    ...(carried ? { registration: carried.registration, registeredAt: carried.registeredAt } : {}),
  };
  try {
    if (!a.registration) {
      try {
        a.registration = await createRunner(ctx, j, instanceId);
        a.registeredAt = ctx.now();
      } catch (error) {
        throw new ColdLaunchError(`registering the runner failed: ${errorName(error)}`, 'register');
      }
    }
    const result = await claim(ctx, a, configValue(ctx, a));
    if (result !== 'claimed') throw new ColdLaunchError(`writing the config parameter failed (${result})`, 'config');
    try {
      await ctx.aws.send(
        ctx.ec2,
        new CreateTagsCommand({ Resources: [instanceId], Tags: [{ Key: ctx.keys.runnerId, Value: a.registration.runnerId }] }),
        WRITE_IDEMPOTENT,
      );
    } catch (error) {
      throw new ColdLaunchError(`tagging the runner id failed: ${errorName(error)}`, 'tag');
    }
    const stages = { launchedAt: launched, registeredAt: a.registeredAt!, startedAt: ctx.now() };
    return { instanceId, runnerId: a.registration.runnerId, capacityType, spotFallback, stages };
  } catch (error) {
    j.log.error('cold launch failed after the launch, terminating the instance', { instanceId, error: (error as Error).message });
    let terminated = false;
    try {
      await ctx.aws.send(ctx.ec2, new TerminateInstancesCommand({ InstanceIds: [instanceId] }), WRITE_IDEMPOTENT);
      terminated = true;
    } catch (terminateError) {
      j.log.error('terminating the failed cold instance failed', { instanceId, error: errorName(terminateError) });
    }
    if (a.registration) await deleteRunner(ctx, j, a.registration.runnerId);
    // The parameter holds the runner's secret: it goes with its instance, not a sweep later.
    // It may exist even when the claim did not answer; not found is done. Once the instance is
    // terminated nobody can claim its name again, so a lost answer is simply resent.
    const outcome = await deleteRunnerConfigs(ctx.aws, ctx.ssm, ctx.paths, [ctx.paths.runnerConfig(instanceId)], { delete: 'single', readBack: 'get', resend: terminated });
    if (outcome.kept.size > 0) j.log.warn('deleting the failed cold instance\'s config parameter failed; the sweep removes it', { instanceId, errors: outcome.errors });
    throw error;
  }
}

/**
 * Deletes the registrations refused warm claims carried for jobs no launch uses them for. A
 * delete that fails (after deleteRunner's retries) is counted as an undo left incomplete, as
 * claim.ts `rollback` counts it; the scale-down's sweep deregisters the runner.
 */
export async function dropCarried(ctx: StepContext, jobs: readonly JobInFlight[], carried: ReadonlyMap<string, Carried>, concurrency: number): Promise<void> {
  await mapLimit(jobs.filter((j) => carried.has(j.key)), concurrency, async (j) => {
    const runnerId = carried.get(j.key)!.registration.runnerId;
    if (await deleteRunner(ctx, j, runnerId)) return;
    j.log.error('deleting the registration a refused claim carried failed; the sweep removes it', { runnerId });
    ctx.metrics.add(ctx.config.metrics.names.jobsFailed, { Pool: j.pool.name, Reason: ROLLBACK_INCOMPLETE });
  });
}

/** The instance a cold launch serves its job on: launched now, or an earlier receive's, taken over. */
export interface ColdFleet {
  readonly instanceId: string;
  readonly capacityType: DefaultTargetCapacityType;
  readonly spotFallback: boolean;
  /** An instance an earlier receive launched: when EC2 launched it. */
  readonly launchedAt?: Date;
}

/** What a redelivery found of its earlier receives' launches: an instance to take over, or one to launch nothing beside until `until`. */
export type EarlierFound = { readonly kind: 'take-over'; readonly fleet: ColdFleet } | { readonly kind: 'busy'; readonly instanceId: string; readonly until: Date };

/**
 * The instance an earlier receive of the message launched and never gave a runner (found by
 * the earlier receives' tokens, in one filtered DescribeInstances), taken over instead of a
 * second launch. Taking it over launches nothing, so it needs neither the cold gate nor a
 * launch ticket: the handler looks it up before the gate (which counts that instance as a
 * launch in flight and would hold the job that can use it). One too old to take over but still
 * waiting for its config is `busy`: the message's ticket is spent on it, so nothing launches
 * beside it until it has ended (cold-tokens.ts `earlierLaunch`). The look-up failing fails
 * this attempt as a refusal (nothing launched, no ticket taken): launching blind could make the
 * second instance.
 */
export async function lookUpEarlier(ctx: StepContext, j: JobInFlight, attempt: LaunchAttempt): Promise<EarlierFound | undefined> {
  const tokens = earlierLaunchTokens(attempt, j.pool.spot);
  if (tokens.length === 0) return undefined;
  let found;
  try {
    found = await describeFleet(ctx.aws, ctx.ec2, ctx.keys, { pool: j.pool.name, states: ['pending', 'running'], tag: { key: ctx.keys.launchToken, value: tokens } });
  } catch (error) {
    throw new ColdLaunchError(`looking up the launches of the message's earlier receives failed: ${errorName(error)}`, 'launch');
  }
  const earlier = earlierLaunch(found, ctx.keys, ctx.now(), adoptWindowSeconds(j.pool), earlierLiveSeconds(j.pool));
  if (!earlier) return undefined;
  const { instance } = earlier;
  if (earlier.kind === 'busy') return { kind: 'busy', instanceId: instance.id, until: earlier.until };
  j.log.warn("taking over the instance an earlier receive of the message launched, instead of launching", { instanceId: instance.id, receiveCount: attempt.receiveCount });
  return { kind: 'take-over', fleet: { instanceId: instance.id, capacityType: instance.spotRequestId ? 'spot' : 'on-demand', spotFallback: false, launchedAt: instance.launchTime } };
}

async function createFleet(ctx: StepContext, j: JobInFlight, launchedAt: Date, attempt: LaunchAttempt): Promise<ColdFleet> {
  const first: DefaultTargetCapacityType = j.pool.spot ? 'spot' : 'on-demand';
  const out = await fleetOnce(ctx, j, j.pool, first, launchedAt, attempt);
  if (out.instanceId) return { instanceId: out.instanceId, capacityType: first, spotFallback: false };
  if (first === 'spot' && out.errors.some((c) => CAPACITY_ERRORS.has(c))) {
    j.log.warn('no spot capacity, launching on-demand', { errors: out.errors });
    ctx.metrics.add(ctx.config.metrics.names.fallbacks, { Pool: j.pool.name, Reason: 'spot-capacity' });
    const again = await fleetOnce(ctx, j, j.pool, 'on-demand', launchedAt, attempt);
    if (again.instanceId) return { instanceId: again.instanceId, capacityType: 'on-demand', spotFallback: true };
    throw new ColdLaunchError(`CreateFleet launched nothing on-demand either: ${again.errors.join(', ') || 'no error given'}`, 'launch');
  }
  throw new ColdLaunchError(`CreateFleet launched nothing: ${out.errors.join(', ') || 'no error given'}`, 'launch');
}

async function fleetOnce(
  ctx: StepContext,
  j: JobInFlight,
  pool: PoolConfig,
  capacityType: DefaultTargetCapacityType,
  launchedAt: Date,
  attempt: LaunchAttempt,
): Promise<{ instanceId?: string; errors: string[] }> {
  const k = ctx.keys;
  const token = launchToken(attempt, capacityType);
  const command = fleetCommand(pool, capacityType, token, coldLaunchTags(k, pool.name, j.job, launchedAt, token, j.affinity));
  // A lost answer is settled by its token (launch-outcome.ts): looked up before each resend
  // (moto ignores the token and would launch again), resent with the same token (EC2 answers
  // with the first fleet, or launches once), at most LAUNCH_SENDS sends.
  const r = await settleLaunch(
    () => ctx.aws.send<CreateFleetCommandOutput>(ctx.ec2, command, WRITE_ONCE),
    async () => (await describeFleet(ctx.aws, ctx.ec2, k, { pool: pool.name, tag: { key: k.launchToken, value: token } })).map((i) => i.id),
    (out) => fleetInstanceIds(out),
  );
  if (r.lost > 0) j.log.warn('CreateFleet outcome unknown, settled by its token', { outcome: r.kind, lostAnswers: r.lost });
  if (r.kind === 'found') return { instanceId: r.ids[0]!, errors: [] };
  // Still unknown: the launch may have happened (its ticket is kept, `launchRefused`). Also a
  // resend refused or answered empty after a lost answer: no on-demand launch beside it.
  if (r.kind === 'unknown') throw new UnknownOutcomeError('CreateFleet', new Error(r.error));
  // A refusal of the first send: nothing launched for it.
  if (r.kind === 'refused') throw r.error;
  const instanceId = fleetInstanceIds(r.out)[0];
  return { ...(instanceId ? { instanceId } : {}), errors: (r.out.Errors ?? []).map((e) => e.ErrorCode ?? 'unknown') };
}

function fleetInstanceIds(out: CreateFleetCommandOutput): string[] {
  return (out.Instances ?? []).flatMap((i) => i.InstanceIds ?? []);
}

/**
 * One instant CreateFleet of a cold launch. It tags the instance only: an instant fleet's
 * TagSpecifications take `instance` and `fleet`, so the volume carries the launch template's
 * tags (the pool's among them, lib/runner-fleet.ts).
 */
export function fleetCommand(pool: PoolConfig, capacityType: DefaultTargetCapacityType, token: string, tags: Tag[]): CreateFleetCommand {
  return new CreateFleetCommand({
    Type: 'instant',
    ClientToken: token,
    LaunchTemplateConfigs: [
      {
        LaunchTemplateSpecification: { LaunchTemplateId: pool.launchTemplateId, Version: pool.launchTemplateVersion },
        Overrides: pool.instanceTypes.flatMap((InstanceType) => pool.subnetIds.map((SubnetId) => ({ InstanceType: InstanceType as _InstanceType, SubnetId }))),
      },
    ],
    TargetCapacitySpecification: { TotalTargetCapacity: 1, DefaultTargetCapacityType: capacityType },
    ...(capacityType === 'spot'
      ? { SpotOptions: { AllocationStrategy: 'price-capacity-optimized' } }
      : { OnDemandOptions: { AllocationStrategy: 'lowest-price' } }),
    TagSpecifications: [{ ResourceType: 'instance', Tags: tags }],
  });
}
