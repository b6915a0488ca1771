import { GetLogEventsCommand, type GetLogEventsCommandOutput } from '@aws-sdk/client-cloudwatch-logs';
import { DescribeInstancesCommand, type DescribeInstancesCommandOutput } from '@aws-sdk/client-ec2';
import { ReceiveMessageCommand } from '@aws-sdk/client-sqs';
import { GetParametersByPathCommand, type GetParametersByPathCommandOutput } from '@aws-sdk/client-ssm';
import { BOOT_LOG_KEYS, bootLogGroupName, LEDGER_STAGE_NAMES, instanceIdOfRunnerName, parseJobMessage, ssmPaths, tagKeys, WARM_STANDBY_VALUE, type FleetConfig, type TagKeys } from '../lambdas/shared/contract';
import type { LocalEvent, LocalEventKind } from './events';
import { formatFaultProof, type FaultProof } from './fault-report';
import { formatDockerProof, type DockerProof } from './docker-run';
import { formatScopesProof, type ScopesProof } from './scopes-run';
import { formatScaleSet, type ScaleSetFigures, type ScaleSetProof } from './scale-set-run';
import { formatReuseProof, type ReuseProof } from './reuse-run';
import type { LocalAwsClients } from './lambdas';

/**
 * The run's outcome: a timeline per job, a summary, and the leftovers. Everything that
 * decides "served" and "left behind" is read by LISTING moto and the loopback CI servers
 * after the run (`observeWorld`), not from what the tool itself did; the events only add
 * the times and the trace ids. `buildReport` is pure, so its rules are tested with tables.
 */

/** A job the scenario created at a CI server and announced by a webhook delivery. */
export interface ScenarioJob {
  readonly provider: 'github' | 'gitlab';
  readonly ciJobId: string;
  readonly pool: string;
  /** When its delivery was sent (epoch ms). */
  readonly deliveredAt: number;
  /** The lossy faults: its delivery was dropped before the webhook, or answered 5xx (absent: delivered). */
  readonly fate?: 'dropped' | 'failed';
  /** Cancelled at its CI server after its delivery: it must not be served. */
  readonly cancelled?: boolean;
}

export interface ObservedInstance {
  readonly id: string;
  readonly state: string;
  readonly tags: Readonly<Record<string, string>>;
  /** EC2's LaunchTime (epoch ms): the last start. */
  readonly launchedAt?: number;
}

/** What moto and the CI servers hold at the end, listed. */
export interface ObservedWorld {
  /** Every instance moto reports (it holds only this fleet), terminated ones included. */
  readonly instances: readonly ObservedInstance[];
  /** Runner config parameter names. */
  readonly parameters: readonly string[];
  /** Registrations at the CI servers: provider, id, name (GitLab: description). */
  readonly registrations: readonly { provider: string; id: string; name: string }[];
  /** CI jobs and their state at the servers. */
  /** done: finished successfully; failed: finished without success (its runner was lost mid-job). */
  readonly ciJobs: readonly { provider: string; id: string; done: boolean; failed?: boolean; cancelled?: boolean; runnerName?: string; createdAt?: string; startedAt?: string }[];
  /** Job messages in the dead-letter queue. */
  readonly deadLetters: readonly { traceId: string; jobId: string; reason: string }[];
  /** Warm target per pool. */
  readonly targets: Readonly<Record<string, number>>;
  /** This run's played runner users still on this host (local/instances/runner-users.ts), listed after the player stopped. */
  readonly users?: readonly string[];
}

export interface TimelineEntry {
  /** Seconds since the job's delivery. */
  readonly at: number;
  readonly kind: LocalEventKind;
  readonly instanceId?: string;
  readonly detail?: string | number;
}

export interface JobReport {
  readonly job: string;
  readonly provider: string;
  readonly ciJobId: string;
  readonly pool: string;
  readonly traceId?: string;
  /** warm: its runner ran on a parked instance; cold: on one launched for a job. */
  readonly served?: 'warm' | 'cold';
  readonly deadLettered?: string;
  /** The CI server failed the job: a runner took it and was lost. */
  readonly failedAtCi?: boolean;
  readonly instanceId?: string;
  /** activation-latency-seconds from the boot script's own line. */
  readonly activationLatencySeconds?: number;
  /** Its latency ledger: each stage's seconds from the stage's origin (contract ledger.ts), as its line says. */
  readonly ledger?: Readonly<Record<string, number>>;
  readonly timeline: readonly TimelineEntry[];
}

/** One ledger stage over the run's jobs, as the dashboard shows it (p50 and p95, nearest rank). */
export interface LedgerStageSummary {
  readonly jobs: number;
  readonly p50: number;
  readonly p95: number;
}

export interface Leftovers {
  /** Live instances that are not parked warm standbys, and parked ones beyond their pool's target. */
  readonly instances: readonly { id: string; pool: string; state: string; why: string }[];
  readonly parameters: readonly string[];
  /** Registrations whose instance is not an activated, unterminated one (or whose name carries no instance). */
  readonly registrations: readonly { provider: string; id: string; name: string }[];
  /** Runner users the played machines' images or install steps made on this host, not removed. */
  readonly users: readonly string[];
  /** `--scale-set`: scale sets and open sessions still at the loopback GitHub after the scale-set resource's Delete. */
  readonly scaleSets?: readonly string[];
}

/**
 * Launch tickets (lambdas/shared/launch-tickets.ts): every launch of an unproven or failing
 * template takes one. A launch that happened keeps its ticket until its expiry (that is the
 * bound), so live tickets at the end are spent slots, not leftovers.
 */
export interface LaunchTicketReport {
  /** Tickets won (a write DynamoDB answered), per function. */
  readonly taken: Readonly<Record<'pool' | 'scale-up', number>>;
  /** Tickets given back (a delete DynamoDB answered: the launch was refused), per function. */
  readonly released: Readonly<Record<'pool' | 'scale-up', number>>;
  /** Unexpired tickets in the table at the end. */
  readonly live: number;
}

export interface LocalReport {
  readonly jobs: number;
  readonly served: number;
  readonly warm: number;
  readonly cold: number;
  readonly unserved: number;
  readonly deadLettered: number;
  /** The count: instances + parameters + registrations + host users left behind. Zero is the only good number. */
  readonly leftovers: number;
  readonly leftoverDetail: Leftovers;
  readonly activationLatencySeconds?: { readonly min: number; readonly median: number; readonly max: number };
  /** The latency ledger per stage over the run's jobs, in the contract's stage order. */
  readonly ledger?: Readonly<Record<string, LedgerStageSummary>>;
  readonly parked: Readonly<Record<string, number>>;
  readonly wallSeconds: number;
  /** How many times slower than an unloaded machine the host ran (measured once); the run's time bounds were scaled by it. */
  readonly slowdown?: number;
  /** Every requested job was sent and the run reached its end state before the deadline. */
  readonly settled: boolean;
  readonly notes: readonly string[];
  /**
   * The served instances' boot logs as read back from CloudWatch Logs (moto): `missing` names
   * each instance whose log stream does not hold its activation-latency line.
   */
  readonly bootLogs?: { readonly checked: number; readonly missing: readonly string[] };
  /** The machine image the instances played and what its install step did. */
  readonly image?: ImageReport;
  /** The tampered-download fault: whether the fleet failed safe (then the run passes). */
  readonly failSafe?: FailSafeReport;
  /** The lossy faults (local/fault-report.ts): whether every job was served once, none cut off, nothing left. */
  readonly faultProof?: FaultProof;
  /** `--reuse` (local/reuse-run.ts): the hit rate, and what each second-wave job found of the first. */
  readonly reuse?: ReuseProof;
  /** `--docker` (local/docker-run.ts): every job ran in its containers, nothing of them left on the daemon, the image kept. */
  readonly docker?: DockerProof;
  /** Authenticated requests the loopback GitHub served per App (`--apps N` spreads them; the fleet spends the App with the most left). */
  readonly githubRequestsByApp?: Readonly<Record<string, number>>;
  /** The roll-over run (`--roll`): parked instances replaced for a newer runner release, and no job after it on the older one. */
  readonly roll?: {
    readonly from: string;
    readonly to: string;
    readonly replaced: number;
    readonly jobsOnOtherRunner: readonly string[];
    readonly passed: boolean;
  };
  /** `--scopes` (local/scopes-run.ts): each job's organisation or project, pool and the scope of the runner that ran it; the Apps answered; the App spent mid-run. */
  readonly scopes?: ScopesProof;
  /** `--scale-set` (local/scale-set-run.ts): the scale set's proof under the listener's faults, and the scale-set and webhook paths' figures side by side. */
  readonly scaleSet?: {
    readonly proof: ScaleSetProof;
    /** Measured between the resource's Create and its Delete. */
    readonly figures: ScaleSetFigures;
    /** GitHub requests of the fleet before the first tick (the Create, the pools filling) and of the teardown (the Delete). */
    readonly deployRequests: number;
  };
  /** The launch tickets the pool and scale-up took and gave back, and those still live in the table at the end. */
  readonly launchTickets?: LaunchTicketReport;
  readonly timeline: readonly JobReport[];
}

export interface ImageReport {
  /** stock: no runner installed, PRIME (or a cold boot) installs it; prebuilt: the runner is in place. */
  readonly kind: 'stock' | 'prebuilt';
  /** Boots whose install step installed the runner. */
  readonly installs: number;
  /** Requests the loopback release server answered. */
  readonly downloads: number;
}

/** A fleet that cannot install its runner (the tampered-download fault), as observed. */
export interface FailSafeReport {
  /** The fleet failed safe: every pool backs off, no runner ran, launches within the bound, every job waits or was dead-lettered. */
  readonly passed: boolean;
  /** What did not hold, when it did not pass. */
  readonly failures: readonly string[];
  /** Why the boots failed, in their own words (distinct). */
  readonly reasons: readonly string[];
  readonly pools: Readonly<Record<string, PoolFailSafe>>;
  /** Instances scale-up launched for jobs (bounded by the cold gate; each must refuse its download and be terminated). */
  readonly coldLaunches: number;
  /** Of those, the ones seen refusing their download (a boot-failed event) and terminated. */
  readonly coldRefused: number;
  /** Boots that started a runner (the boot script's line): must be 0. */
  readonly runnersStarted: number;
  /** CI jobs a runner took (a registration used): must be 0. */
  readonly jobsTaken: number;
  /** Jobs still queued at their CI server, unserved and not dead-lettered (they wait). */
  readonly jobsWaiting: readonly string[];
  /**
   * The waiting jobs whose last word from scale-up is a hold by their pool's prime back-off:
   * each is a wait copy in the jobs queue (a job waiting, not a leftover of the fleet).
   */
  readonly jobsHeld: readonly string[];
  /** Why scale-up held them, in its own words (distinct). */
  readonly heldWhy: readonly string[];
  readonly jobsDeadLettered: readonly string[];
}

export interface PoolFailSafe {
  /** Instances launched for the pool in the run: its warm standbys plus scale-up's cold launches (one back-off bounds both). */
  readonly launches: number;
  readonly standbys: number;
  readonly coldLaunches: number;
  /** The back-off's bound for the pool's clock span: primeFailureLimit + ceil(span / primeBackoffCap). */
  readonly bound: number;
  /** Boots of its standbys that failed and said so. */
  readonly failedPrimes: number;
  /** The PrimeBackoff metric of the last pool run (what the alarm watches). */
  readonly primeBackoff: number;
}

/**
 * Whether the fleet failed safe (pure). `spanSeconds`: how much time the pool's clock saw
 * pass (the run's wall time plus the furthest the harness moved it ahead).
 */
export function buildFailSafe(input: {
  readonly config: FleetConfig;
  readonly world: ObservedWorld;
  readonly events: readonly LocalEvent[];
  readonly jobs: readonly JobReport[];
  readonly primeBackoff: Readonly<Record<string, number>>;
  readonly spanSeconds: number;
}): FailSafeReport {
  const { config, world, events } = input;
  const keys = tagKeys(config.prefix);
  const failedBoots = new Set(events.filter((e) => e.kind === 'boot-failed' && e.instanceId).map((e) => e.instanceId!));
  const pools: Record<string, PoolFailSafe> = {};
  const failures: string[] = [];
  let coldRefused = 0;
  for (const pool of config.pools) {
    const mine = world.instances.filter((i) => i.tags[keys.pool] === pool.name);
    const standbys = mine.filter((i) => i.tags[keys.warmStandby] === WARM_STANDBY_VALUE);
    const cold = mine.filter((i) => i.tags[keys.warmStandby] !== WARM_STANDBY_VALUE);
    const bound = pool.warm.primeFailureLimit + Math.ceil(Math.max(1, input.spanSeconds) / pool.warm.primeBackoffCapSeconds);
    const p = {
      launches: mine.length,
      standbys: standbys.length,
      coldLaunches: cold.length,
      bound,
      failedPrimes: standbys.filter((i) => failedBoots.has(i.id)).length,
      primeBackoff: input.primeBackoff[pool.name] ?? 0,
    };
    pools[pool.name] = p;
    if (p.primeBackoff !== 1) failures.push(`${pool.name}: PrimeBackoff ${p.primeBackoff}, not 1`);
    if (p.launches > bound) failures.push(`${pool.name}: ${p.launches} launches (${p.standbys} standbys, ${p.coldLaunches} cold), above the bound of ${bound}`);
    // A cold launch must have refused its download (its boot-failed event) and be gone.
    coldRefused += cold.filter((i) => failedBoots.has(i.id) && i.state === 'terminated').length;
    for (const i of cold) {
      if (!failedBoots.has(i.id)) failures.push(`${pool.name}: cold launch ${i.id} did not report a refused download`);
      if (i.state !== 'terminated') failures.push(`${pool.name}: cold launch ${i.id} is ${i.state}, not terminated`);
    }
  }
  const runnersStarted = events.filter((e) => e.kind === 'runner-started').length;
  if (runnersStarted > 0) failures.push(`${runnersStarted} runner(s) started`);
  const jobsTaken = world.ciJobs.filter((j) => j.done || j.failed || j.runnerName).length;
  if (jobsTaken > 0) failures.push(`${jobsTaken} CI job(s) taken by a runner`);
  const ciJob = new Map(world.ciJobs.map((j) => [`${j.provider}:${j.id}`, j]));
  const jobsDeadLettered = input.jobs.filter((j) => j.deadLettered).map((j) => j.job);
  const jobsWaiting = input.jobs.filter((j) => !j.deadLettered && !j.served && ciJob.has(j.job) && !ciJob.get(j.job)!.done && !ciJob.get(j.job)!.failed).map((j) => j.job);
  const lost = input.jobs.filter((j) => !jobsWaiting.includes(j.job) && !jobsDeadLettered.includes(j.job));
  if (lost.length > 0) failures.push(`jobs neither waiting nor dead-lettered: ${lost.map((j) => j.job).join(', ')}`);
  const reasons = [...new Set(events.filter((e) => e.kind === 'boot-failed').map((e) => String(e.detail ?? '')))];
  const coldLaunches = Object.values(pools).reduce((n, p) => n + p.coldLaunches, 0);
  const lastHold = (j: JobReport) => j.timeline.filter((e) => e.kind === 'held' || e.kind === 'started' || e.kind === 'dead-lettered').at(-1);
  const held = input.jobs.filter((j) => jobsWaiting.includes(j.job) && lastHold(j)?.kind === 'held');
  const heldWhy = [...new Set(held.map((j) => String(lastHold(j)!.detail ?? 'held')))];
  return { passed: failures.length === 0, failures, reasons, pools, coldLaunches, coldRefused, runnersStarted, jobsTaken, jobsWaiting, jobsHeld: held.map((j) => j.job), heldWhy, jobsDeadLettered };
}

/** Every state but terminated: a shutting-down instance is still there (and still billed). */
const LIVE = new Set(['pending', 'running', 'shutting-down', 'stopping', 'stopped']);

export function buildReport(input: {
  readonly config: FleetConfig;
  readonly jobs: readonly ScenarioJob[];
  readonly events: readonly LocalEvent[];
  readonly world: ObservedWorld;
  readonly startedAt: number;
  readonly endedAt: number;
  readonly notes?: readonly string[];
  readonly settled?: boolean;
  readonly bootLogs?: LocalReport['bootLogs'];
  readonly slowdown?: number;
}): LocalReport {
  const { config, jobs, events, world } = input;
  const keys = tagKeys(config.prefix);
  const byId = new Map(world.instances.map((i) => [i.id, i]));
  const key = (provider: string | undefined, id: string | undefined) => `${provider}:${id}`;
  const ciJobs = new Map(world.ciJobs.map((j) => [key(j.provider, j.id), j]));
  // The trace id of a job: from its 'queued' event (the webhook's log line).
  // A job found twice (a redelivery and the reconciler's listing) has two: the one that started an instance wins.
  const traceOf = new Map<string, string>();
  const startedTraces = new Set(events.filter((e) => e.kind === 'started' && e.traceId).map((e) => e.traceId!));
  for (const e of events) {
    if (e.kind !== 'queued' || !e.traceId) continue;
    const k = key(e.provider, e.ciJobId);
    const had = traceOf.get(k);
    if (had === undefined || !startedTraces.has(had)) traceOf.set(k, e.traceId);
  }
  const deadByTrace = new Map(world.deadLetters.map((d) => [d.traceId, d.reason]));

  const reports: JobReport[] = jobs.map((job) => {
    const id = key(job.provider, job.ciJobId);
    const traceId = traceOf.get(id);
    const ci = ciJobs.get(id);
    // Where the job ran: the CI server's record, or its job-done event (a GitLab runner's
    // registration, which holds the name, is deleted by scale-down after the job).
    const ranOn = ci?.runnerName ?? events.find((e) => e.kind === 'job-done' && e.runnerName && key(e.provider, e.ciJobId) === id)?.runnerName;
    const runnerInstance = ranOn ? instanceIdOfRunnerName(config.prefix, ranOn) : undefined;
    const started = events.filter((e) => e.kind === 'started' && traceId !== undefined && e.traceId === traceId);
    const instanceId = runnerInstance ?? started.at(-1)?.instanceId;
    // Warm or cold is a property of the instance the job ran on (maybe another job's activation).
    const startedOn = events.find((e) => e.kind === 'started' && instanceId !== undefined && e.instanceId === instanceId);
    // The instances activated for the job. Its runner may have run on another job's
    // instance (a CI service hands a runner the oldest matching job): job-done names it.
    const mine = new Set((started.length ? started.map((e) => e.instanceId) : [runnerInstance]).filter((x): x is string => x !== undefined));
    const served = ci?.done ? servedHow(instanceId ? byId.get(instanceId) : undefined, keys, startedOn?.detail) : undefined;
    const timeline: TimelineEntry[] = events
      .filter((e) => e.kind !== 'stage' && e.t >= job.deliveredAt - 1)
      .filter(
        (e) =>
          (traceId !== undefined && e.traceId === traceId) ||
          (e.ciJobId !== undefined && e.provider !== undefined && key(e.provider, e.ciJobId) === id) ||
          (e.instanceId !== undefined && e.traceId === undefined && e.ciJobId === undefined && mine.has(e.instanceId)),
      )
      .sort((a, b) => a.t - b.t)
      .map((e) => ({
        at: Math.round((e.t - job.deliveredAt) / 10) / 100,
        kind: e.kind,
        ...(e.instanceId ? { instanceId: e.instanceId } : {}),
        ...(e.detail !== undefined
          ? { detail: e.detail }
          : e.kind === 'job-done' && e.runnerName
            ? { detail: `ran on ${instanceIdOfRunnerName(config.prefix, e.runnerName) ?? e.runnerName}` }
            : {}),
      }));
    const dead = traceId ? deadByTrace.get(traceId) : undefined;
    if (dead !== undefined && !timeline.some((e) => e.kind === 'dead-lettered')) {
      // Moved by the redrive policy (no handler logged it): shown when the listing found it.
      timeline.push({ at: Math.round((input.endedAt - job.deliveredAt) / 10) / 100, kind: 'dead-lettered', detail: `${dead} (found in the dead-letter queue at the end)` });
    }
    const latency = events.find((e) => e.kind === 'runner-started' && traceId !== undefined && e.traceId === traceId && typeof e.detail === 'number');
    // The job's stages: the Lambdas' lines carry its trace id or job id, the instance's its trace id (first of each stage).
    const ledger: Record<string, number> = {};
    for (const e of events) {
      if (e.kind !== 'stage' || typeof e.detail !== 'string' || e.seconds === undefined || e.detail in ledger) continue;
      if ((traceId !== undefined && e.traceId === traceId) || (e.ciJobId !== undefined && key(e.provider, e.ciJobId) === id)) ledger[e.detail] = e.seconds;
    }
    return {
      job: id,
      provider: job.provider,
      ciJobId: job.ciJobId,
      pool: job.pool,
      ...(traceId ? { traceId } : {}),
      ...(served ? { served } : {}),
      ...(dead ? { deadLettered: dead } : {}),
      ...(ci?.failed ? { failedAtCi: true } : {}),
      ...(instanceId ? { instanceId } : {}),
      ...(latency ? { activationLatencySeconds: latency.detail as number } : {}),
      ...(Object.keys(ledger).length ? { ledger } : {}),
      timeline,
    };
  });

  const leftoverDetail = findLeftovers(config, keys, world);
  const latencies = reports.map((r) => r.activationLatencySeconds).filter((x): x is number => x !== undefined).sort((a, b) => a - b);
  const ledger = summarizeLedger(reports);
  const parked: Record<string, number> = {};
  for (const pool of config.pools) parked[pool.name] = world.instances.filter((i) => i.tags[keys.pool] === pool.name && isParkedStandby(i, keys)).length;
  const served = reports.filter((r) => r.served).length;
  return {
    jobs: jobs.length,
    served,
    warm: reports.filter((r) => r.served === 'warm').length,
    cold: reports.filter((r) => r.served === 'cold').length,
    unserved: jobs.length - served,
    deadLettered: reports.filter((r) => r.deadLettered).length,
    leftovers: leftoverDetail.instances.length + leftoverDetail.parameters.length + leftoverDetail.registrations.length + leftoverDetail.users.length,
    leftoverDetail,
    ...(latencies.length
      ? { activationLatencySeconds: { min: latencies[0]!, median: latencies[Math.floor((latencies.length - 1) / 2)]!, max: latencies.at(-1)! } }
      : {}),
    ...(Object.keys(ledger).length ? { ledger } : {}),
    parked,
    wallSeconds: Math.round((input.endedAt - input.startedAt) / 100) / 10,
    ...(input.slowdown === undefined ? {} : { slowdown: input.slowdown }),
    settled: input.settled ?? true,
    notes: input.notes ?? [],
    ...(input.bootLogs ? { bootLogs: input.bootLogs } : {}),
    timeline: reports,
  };
}

/** p50 and p95 (nearest rank) of each stage over the jobs that have it, in the contract's stage order (pure). */
export function summarizeLedger(jobs: readonly Pick<JobReport, 'ledger'>[]): Record<string, LedgerStageSummary> {
  const out: Record<string, LedgerStageSummary> = {};
  for (const stage of LEDGER_STAGE_NAMES) {
    const values = jobs.map((j) => j.ledger?.[stage]).filter((x): x is number => x !== undefined).sort((a, b) => a - b);
    const rank = (p: number) => values[Math.max(0, Math.ceil((p / 100) * values.length) - 1)]!;
    if (values.length) out[stage] = { jobs: values.length, p50: rank(50), p95: rank(95) };
  }
  return out;
}

/** Warm when the instance was built by the pool (a parked standby), cold when scale-up launched it. */
function servedHow(instance: ObservedInstance | undefined, keys: TagKeys, startedDetail: string | number | undefined): 'warm' | 'cold' {
  if (instance) return instance.tags[keys.warmStandby] === WARM_STANDBY_VALUE ? 'warm' : 'cold';
  return startedDetail === 'warm' ? 'warm' : 'cold';
}

function isParkedStandby(i: ObservedInstance, keys: TagKeys): boolean {
  return i.state === 'stopped' && i.tags[keys.warmStandby] === WARM_STANDBY_VALUE && i.tags[keys.activatedAt] === undefined && i.tags[keys.jobId] === undefined;
}

/** What must not be there once every job is done (pure). */
export function findLeftovers(config: FleetConfig, keys: TagKeys, world: ObservedWorld): Leftovers {
  const instances: { id: string; pool: string; state: string; why: string }[] = [];
  const live = world.instances.filter((i) => LIVE.has(i.state));
  for (const pool of config.pools) {
    const mine = live.filter((i) => i.tags[keys.pool] === pool.name);
    const parked = mine.filter((i) => isParkedStandby(i, keys));
    for (const i of mine) if (!parked.includes(i)) instances.push({ id: i.id, pool: pool.name, state: i.state, why: i.tags[keys.jobId] || i.tags[keys.activatedAt] ? 'activated for a job, still there' : 'not parked' });
    const target = world.targets[pool.name] ?? 0;
    for (const i of parked.slice(target)) instances.push({ id: i.id, pool: pool.name, state: i.state, why: `beyond the pool's target of ${target}` });
  }
  for (const i of live) {
    const pool = i.tags[keys.pool];
    // moto holds only this fleet: an instance without the pool tag is something the fleet
    // launched and lost track of (or tagged after launch and never finished).
    if (pool === undefined) instances.push({ id: i.id, pool: '-', state: i.state, why: 'no pool tag' });
    else if (!config.pools.some((p) => p.name === pool)) instances.push({ id: i.id, pool, state: i.state, why: 'pool not in the fleet config' });
  }
  // A registration belongs to an activation: its instance carries the job or the activation
  // time and is not terminated. One on a parked standby (stopped, never activated) or on an
  // instance that is gone is left behind.
  const activatedIds = new Set(live.filter((i) => i.tags[keys.jobId] || i.tags[keys.activatedAt]).map((i) => i.id));
  const registrations = world.registrations.filter((r) => {
    const id = instanceIdOfRunnerName(config.prefix, r.name);
    return id === undefined || !activatedIds.has(id);
  });
  return { instances, parameters: [...world.parameters], registrations, users: [...(world.users ?? [])] };
}

/**
 * Every instance moto reports, terminated ones included. No tag filter: moto holds only this
 * fleet (a used moto is refused), so an instance without the pool tag is a leftover too.
 */
export async function listInstances(clients: LocalAwsClients): Promise<ObservedInstance[]> {
  const instances: ObservedInstance[] = [];
  let token: string | undefined;
  do {
    const out: DescribeInstancesCommandOutput = await clients.ec2.send(
      new DescribeInstancesCommand(token ? { NextToken: token } : {}),
    );
    for (const r of out.Reservations ?? [])
      for (const i of r.Instances ?? [])
        instances.push({
          id: i.InstanceId!,
          state: i.State?.Name ?? 'unknown',
          tags: Object.fromEntries((i.Tags ?? []).map((t) => [t.Key!, t.Value ?? ''])),
          ...(i.LaunchTime ? { launchedAt: i.LaunchTime.getTime() } : {}),
        });
    token = out.NextToken;
  } while (token);
  return instances;
}

/** Lists moto and the CI servers: the facts the report's counts come from. */
export async function observeWorld(
  clients: LocalAwsClients,
  config: FleetConfig,
  ci: {
    registrations: () => { provider: string; id: string; name: string }[];
    jobs: () => { provider: string; id: string; done: boolean; failed?: boolean; runnerName?: string }[];
  },
  deadLetterQueueUrl: string,
  targets: Readonly<Record<string, number>>,
): Promise<ObservedWorld> {
  const instances = await listInstances(clients);
  const parameters: string[] = [];
  let token: string | undefined;
  do {
    const out: GetParametersByPathCommandOutput = await clients.ssm.send(
      new GetParametersByPathCommand({ Path: ssmPaths(config.prefix).runnerConfigRoot, Recursive: true, WithDecryption: false, ...(token ? { NextToken: token } : {}) }),
    );
    for (const p of out.Parameters ?? []) if (p.Name) parameters.push(p.Name);
    token = out.NextToken;
  } while (token);

  return { instances, parameters, registrations: ci.registrations(), ciJobs: ci.jobs(), deadLetters: await listDeadLetters(clients, deadLetterQueueUrl), targets };
}

/**
 * Which of these instances' boot log streams (the boot script names each after its instance)
 * lack the activation-latency line: read back from CloudWatch Logs, so a served instance
 * proves its boot log was shipped end to end.
 */
export async function checkBootLogs(clients: LocalAwsClients, prefix: string, instanceIds: readonly string[]): Promise<{ checked: number; missing: string[] }> {
  const ids = [...new Set(instanceIds)];
  const latency = `${BOOT_LOG_KEYS.activationLatency}=`;
  const missing: string[] = [];
  for (const id of ids) {
    let found = false;
    let token: string | undefined;
    try {
      for (let page = 0; page < 100 && !found; page++) {
        const out: GetLogEventsCommandOutput = await clients.logs.send(
          new GetLogEventsCommand({ logGroupName: bootLogGroupName(prefix), logStreamName: id, startFromHead: true, ...(token ? { nextToken: token } : {}) }),
        );
        found = (out.events ?? []).some((e) => e.message?.includes(latency));
        // The same token back: the end of the stream.
        if (!out.nextForwardToken || out.nextForwardToken === token) break;
        token = out.nextForwardToken;
      }
    } catch (error) {
      if ((error as Error).name !== 'ResourceNotFoundException') throw error;
    }
    if (!found) missing.push(id);
  }
  return { checked: ids.length, missing };
}

/**
 * The dead-letter queue's messages: received with a visibility timeout (hidden meanwhile, so
 * each is seen once) until the queue answers empty. Nothing is deleted.
 */
async function listDeadLetters(clients: LocalAwsClients, queueUrl: string): Promise<{ traceId: string; jobId: string; reason: string }[]> {
  const seen = new Map<string, { traceId: string; jobId: string; reason: string }>();
  for (let round = 0; round < 100; round++) {
    const out = await clients.sqs.send(new ReceiveMessageCommand({ QueueUrl: queueUrl, MaxNumberOfMessages: 10, VisibilityTimeout: 30, MessageAttributeNames: ['All'] }));
    const messages = out.Messages ?? [];
    if (messages.length === 0) break;
    for (const m of messages) {
      const reason = m.MessageAttributes?.['dead-letter-reason']?.StringValue ?? 'redrive (retries exhausted)';
      try {
        const job = parseJobMessage(m.Body ?? '');
        seen.set(m.MessageId!, { traceId: job.traceId, jobId: job.jobId, reason });
      } catch {
        seen.set(m.MessageId!, { traceId: '', jobId: '', reason: `malformed: ${reason}` });
      }
    }
  }
  return [...seen.values()];
}

function formatFailSafe(f: FailSafeReport): string[] {
  const lines = [`fail-safe (tampered download): ${f.passed ? 'PASSED, the fleet failed safe' : `FAILED: ${f.failures.join('; ')}`}`];
  for (const [pool, p] of Object.entries(f.pools)) {
    const within = p.launches <= p.bound ? 'within' : 'ABOVE';
    lines.push(`  pool ${pool}: PrimeBackoff ${p.primeBackoff} (the alarm's metric), ${p.launches} launch(es) (${p.standbys} standby, ${p.coldLaunches} cold) ${within} the back-off bound of ${p.bound}, ${p.failedPrimes} failed prime(s)`);
  }
  lines.push(`  runners started ${f.runnersStarted}, CI jobs taken by a runner ${f.jobsTaken}, cold launches ${f.coldLaunches} (${f.coldRefused} seen refusing their download and terminated)`);
  lines.push(`  jobs not served: ${f.jobsWaiting.length} wait at their CI server${f.jobsWaiting.length ? ` (${f.jobsWaiting.join(', ')})` : ''}, ${f.jobsDeadLettered.length} dead-lettered${f.jobsDeadLettered.length ? ` (${f.jobsDeadLettered.join(', ')})` : ''}`);
  if (f.jobsHeld.length) {
    lines.push(`  held by the prime back-off: ${f.jobsHeld.length} of the waiting jobs (${f.jobsHeld.join(', ')}), each a wait copy in the jobs queue until a probe proves the pool or its maximum wait dead-letters it; waiting jobs, not leftovers`);
    for (const w of f.heldWhy) lines.push(`  held because: ${w}`);
  }
  for (const r of f.reasons) lines.push(`  why: ${r}`);
  return lines;
}

/** The human-readable report: per-job timelines, then the summary and the leftovers. */
export function formatReport(report: LocalReport, options: { timelines?: boolean } = {}): string {
  const lines: string[] = [];
  const s = (x: number) => `${x.toFixed(2).padStart(6)}s`;
  if (options.timelines !== false) {
    for (const j of report.timeline) {
      const how = j.served
        ? `served ${j.served}${j.instanceId ? ` on ${j.instanceId}` : ''}`
        : j.deadLettered
          ? `DEAD-LETTERED (${j.deadLettered})`
          : j.failedAtCi
            ? `FAILED at the CI server (its runner was lost${j.instanceId ? ` on ${j.instanceId}` : ''})`
            : 'NOT SERVED';
      lines.push(`job ${j.job} pool ${j.pool} trace ${j.traceId ?? '-'}: ${how}`);
      for (const e of j.timeline) {
        const detail = e.kind === 'runner-started' && typeof e.detail === 'number' ? `activation-latency ${e.detail}s` : e.detail;
        const rest = [e.instanceId, detail].filter((x) => x !== undefined && x !== '').join(' ');
        lines.push(`  ${s(e.at)}  ${e.kind.padEnd(17)}${rest}`.trimEnd());
      }
    }
    lines.push('');
  }
  const lat = report.activationLatencySeconds;
  lines.push(
    `jobs ${report.jobs}: served ${report.served} (warm ${report.warm}, cold ${report.cold}), unserved ${report.unserved}, dead-lettered ${report.deadLettered}`,
  );
  if (lat) lines.push(`activation to runner start (boot script's latency line): min ${lat.min}s, median ${lat.median}s, max ${lat.max}s`);
  if (report.ledger) {
    lines.push('latency ledger (s; received and job-started from the job\'s creation, the instance stages from activation, the rest from receipt):');
    for (const [stage, v] of Object.entries(report.ledger)) lines.push(`  ${stage.padEnd(17)}p50 ${v.p50.toFixed(3).padStart(8)}  p95 ${v.p95.toFixed(3).padStart(8)}  (${v.jobs} jobs)`);
  }
  lines.push(`parked at the end: ${Object.entries(report.parked).map(([p, n]) => `${p} ${n}`).join(', ')}`);
  const d = report.leftoverDetail;
  lines.push(
    `leftovers: ${report.leftovers} (instances ${d.instances.length}, config parameters ${d.parameters.length}, CI registrations without an instance ${d.registrations.length}, runner users on this host ${d.users.length}${d.scaleSets ? `, scale sets and sessions after the Delete ${d.scaleSets.length}` : ''})`,
  );
  for (const i of d.instances) lines.push(`  instance ${i.id} (${i.pool}, ${i.state}): ${i.why}`);
  for (const p of d.parameters) lines.push(`  parameter ${p}`);
  for (const r of d.registrations) lines.push(`  ${r.provider} runner ${r.id} ${r.name}`);
  for (const u of d.users) lines.push(`  runner user ${u}`);
  if (report.bootLogs) {
    const b = report.bootLogs;
    lines.push(`boot logs in CloudWatch Logs: ${b.checked - b.missing.length} of ${b.checked} served instances' streams hold their latency line${b.missing.length ? ` (missing: ${b.missing.join(', ')})` : ''}`);
  }
  if (report.image) {
    const i = report.image;
    lines.push(`image: ${i.kind}${i.kind === 'stock' ? ` (no runner installed): ${i.installs} boot(s) installed the runner, ${i.downloads} download(s) from the loopback release server` : ' (the runner in place)'}`);
  }
  if (report.launchTickets) {
    const t = report.launchTickets;
    lines.push(
      `launch tickets: taken pool ${t.taken.pool}, scale-up ${t.taken['scale-up']}; released pool ${t.released.pool}, scale-up ${t.released['scale-up']}; ${t.live} live at the end (spent slots of launches that happened, free at their expiry; not leftovers)`,
    );
  }
  if (report.githubRequestsByApp) lines.push(`GitHub requests per App: ${Object.entries(report.githubRequestsByApp).map(([app, n]) => `${app} ${n}`).join(', ')}`);
  if (report.failSafe) lines.push(...formatFailSafe(report.failSafe));
  if (report.faultProof) lines.push(...formatFaultProof(report.faultProof));
  if (report.reuse) lines.push(...formatReuseProof(report.reuse));
  if (report.docker) lines.push(...formatDockerProof(report.docker));
  if (report.scopes) lines.push(...formatScopesProof(report.scopes));
  if (report.scaleSet) lines.push(...formatScaleSet(report.scaleSet.proof, report.scaleSet.figures), `  the scale set's Create and Delete (and anything before the Create): ${report.scaleSet.deployRequests} request(s), in neither path`);
  for (const n of report.notes) lines.push(`note: ${n}`);
  if (report.slowdown !== undefined && report.slowdown > 1) {
    lines.push(`machine slowdown x${report.slowdown} (measured at the start; the run's time bounds were scaled by it)`);
  }
  const whole = report.failSafe
    ? 'the whole run: moto started, fleet provisioned, pools backed off, jobs held, launched and refused, or dead-lettered, all settled'
    : 'the whole run: moto started, fleet provisioned, pools filled, jobs served, all settled';
  lines.push(`wall time ${report.wallSeconds}s (${report.settled ? whole : 'the whole run, until it gave up: NOT SETTLED'})`);
  return lines.join('\n');
}
