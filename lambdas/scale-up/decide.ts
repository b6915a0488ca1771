import { affinityOf, LATE_DELIVERY_SECONDS, type FleetConfig, type JobMessage, type PoolConfig, type TagKeys } from '../shared/contract';
import { templateVersionOf, type ObservedInstance } from '../shared/instances';
import { classify } from '../pool/classify';
import { coldGate, observeStarts, type ColdGate, type PrimeStreak } from '../pool/backoff';
import type { WaitState } from './queue';

/** A job of the batch, with the pool its labels matched (resolved before deciding). */
export interface QueuedJob {
  /** The SQS message id: decisions are keyed by message, since one job can arrive twice. */
  readonly key: string;
  readonly job: JobMessage;
  readonly pool: string;
  /** Instances of the job's earlier attempts (a retry, retry.ts): they carry its job id but do not serve it. */
  readonly superseded?: readonly string[];
}

export type Decision =
  /** An instance already serves this job (started, with its runner registered): nothing to do. */
  | { readonly kind: 'served'; readonly instanceId: string }
  /** The same job appears earlier in this batch; that message serves it. */
  | { readonly kind: 'duplicate' }
  /** The job's pool is not in the fleet config (it changed since the webhook matched it). */
  | { readonly kind: 'unknown-pool' }
  /** The pool is at maxRunners: retry later, without using the failure budget. */
  | { readonly kind: 'wait' }
  /** Waited for capacity longer than the maximum age: dead-letter it. */
  | { readonly kind: 'expired' }
  | { readonly kind: 'warm' }
  | { readonly kind: 'cold' };

export interface Plan {
  /** One decision per job, in the order given. */
  readonly decisions: ReadonlyMap<string, Decision>;
  /** Per candidate list (`bucketOf`), the parked instances in the order this invocation tries them. */
  readonly candidates: ReadonlyMap<string, readonly string[]>;
}

/** States in which an instance holds a runner slot of its pool. */
const RUNNING = new Set(['pending', 'running', 'stopping']);

/** FNV-1a: a cheap, stable hash for spreading candidate orders. */
export function fnv1a(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h;
}

/** Parked instances per candidate list (`bucketOf`), ordered by a hash of (salt, id). */
export function orderCandidates(parked: ReadonlyMap<string, readonly string[]>, salt: string): Map<string, string[]> {
  const candidates = new Map<string, string[]>();
  for (const [pool, ids] of parked) {
    candidates.set(
      pool,
      ids.map((id) => ({ id, rank: fnv1a(`${salt}|${id}`) })).sort((a, b) => a.rank - b.rank || (a.id < b.id ? -1 : 1)).map((c) => c.id),
    );
  }
  return candidates;
}

/**
 * The candidate list a parked instance belongs to: the pool's name for a fresh one (no
 * affinity), the pool and affinity for one that parked with a reusable pool's caches. Pool
 * names have no "#" (contract names.ts), so the keys never collide.
 */
export function bucketOf(pool: string, affinity?: string): string {
  return affinity === undefined ? pool : `${pool}#${affinity}`;
}

/**
 * The affinity a job of `pool` is served under (contract reuse.ts `affinityOf`), undefined
 * when the pool is not reusable or the job has none (a GitLab job without a project id):
 * such a job is served as in a pool without reuse, by a fresh or cold instance whose config
 * carries no `reuse` (so it terminates after the job) and whose runner is registered as
 * the pool's runners are.
 */
export function reuseAffinityOf(pool: Pick<PoolConfig, 'reuse'>, job: Pick<JobMessage, 'provider' | 'owner' | 'project' | 'projectId'>): string | undefined {
  if (pool.reuse === undefined) return undefined;
  try {
    return affinityOf(job);
  } catch {
    return undefined;
  }
}

/**
 * The candidate lists a job takes from, in order (R1): its affinity's parked instances (a
 * reuse hit), then fresh ones. Never an instance with another affinity, in any pool: a
 * pool whose reuse was switched off offers only fresh ones (the pool evicts the others).
 */
export function bucketsFor(pool: string, affinity: string | undefined): string[] {
  return affinity === undefined ? [bucketOf(pool)] : [bucketOf(pool, affinity), bucketOf(pool)];
}

/** The parked instances per candidate list (`bucketOf`), as scale-up may claim them. */
export function parkedByBucket(instances: readonly ObservedInstance[], keys: TagKeys): Map<string, string[]> {
  const parked = new Map<string, string[]>();
  for (const i of instances) {
    const pool = i.tags.get(keys.pool);
    if (pool === undefined || classify(i, keys, false) !== 'parked') continue;
    const bucket = bucketOf(pool, i.tags.get(keys.affinity));
    (parked.get(bucket) ?? parked.set(bucket, []).get(bucket)!).push(i.id);
  }
  return parked;
}

/** The `uses` tag of parked instances (0 when absent or unreadable: a fresh instance). */
export function usesOf(instance: ObservedInstance, keys: TagKeys): number {
  const v = instance.tags.get(keys.uses);
  return v !== undefined && /^\d{1,6}$/.test(v) ? Number(v) : 0;
}

export type Arrival =
  /** A wait copy back before its `not-before`: hidden for the rest of its wait, reported as not processed. */
  | { readonly kind: 'early'; readonly hideSeconds: number }
  /**
   * To be served. `redelivered`: SQS delivered it before (a failed attempt); `first`: the
   * job's first delivery (not a redelivery, not a wait copy, not a retry check scale-up sent
   * itself after serving the job), counted as dequeued and stamped in its ledger.
   */
  | { readonly kind: 'ready'; readonly redelivered: boolean; readonly first: boolean };

/** What a message's receive count and wait attributes (queue.ts) make of it at `now`. */
export function arrivalOf(wait: WaitState, receiveCount: string | undefined, now: Date): Arrival {
  if (wait.notBefore && wait.notBefore.getTime() > now.getTime()) return { kind: 'early', hideSeconds: (wait.notBefore.getTime() - now.getTime()) / 1000 };
  const redelivered = Number(receiveCount ?? '1') > 1;
  return { kind: 'ready', redelivered, first: wait.waits === 0 && !redelivered && !wait.retryCheck };
}

/**
 * Whether a delivery is about a job created more than `LATE_DELIVERY_SECONDS` before now: a
 * redelivery or a resent hook event (GitLab keeps failed events 7 days), whose job may have
 * finished long ago and whose per-job record may have expired. Such a job is asked about at
 * the provider before a runner is registered for it. A job without a creation time is not.
 */
export function isLateDelivery(job: Pick<JobMessage, 'createdAt'>, now: Date): boolean {
  if (job.createdAt === undefined) return false;
  return (now.getTime() - Date.parse(job.createdAt)) / 1000 > LATE_DELIVERY_SECONDS;
}

/**
 * A message that comes back (an SQS redelivery or a capacity wait copy), or a first one that
 * arrives late (`isLateDelivery`): its job may have been served, cancelled or finished
 * meanwhile, so it is asked at the provider before it is served.
 */
export function comesBack(m: { readonly redelivered: boolean; readonly waits: number; readonly late?: boolean }): boolean {
  return m.redelivered || m.waits > 0 || m.late === true;
}

/** What the per-job record claim (job-record.ts `admitByRecord`) said of the batch. */
export interface Admission<T> {
  /** Copies of a job another delivery holds. */
  readonly dropped: readonly T[];
  /** Copies of a job a runner was started for already. */
  readonly served: readonly { readonly item: T }[];
  /** Admitted without a record (the store failed). */
  readonly unrecorded: readonly T[];
  /** Admitted jobs with instances of earlier attempts. */
  readonly superseded: ReadonlyMap<T, readonly string[]>;
}

export interface RecordTriage<T> {
  /** Go on to be decided (wait, warm, cold), in the batch's order. */
  readonly proceed: T[];
  /**
   * Retry checks with nothing to retry: no served record (expired, or not written) and no
   * earlier attempt. They must not launch for a job nobody re-checked at the provider.
   */
  readonly strays: T[];
  /** Retry checks whose record could not be read: not strays, they fail and SQS redelivers them. */
  readonly unread: T[];
}

/**
 * Which of the batch's messages go on to be decided after the record claim: not the dropped
 * and served copies (settled, or checked for a retry, elsewhere), not those whose taken-over
 * job is `gone` (no longer queued, or the provider could not say), and no retry check that is
 * a stray or unread.
 */
export function triageByRecord<T extends { readonly retryCheck: boolean }>(live: readonly T[], admission: Admission<T>, gone: readonly T[]): RecordTriage<T> {
  const served = new Set(admission.served.map((s) => s.item));
  const unread = live.filter((i) => i.retryCheck && admission.unrecorded.includes(i));
  const strays = live.filter((i) => i.retryCheck && !served.has(i) && !admission.dropped.includes(i) && !admission.superseded.has(i) && !unread.includes(i));
  const out = new Set([...admission.dropped, ...gone, ...strays, ...unread, ...served]);
  return { proceed: live.filter((i) => !out.has(i)), strays, unread };
}

/**
 * Which jobs go warm, cold or wait, from observed state only.
 *
 * - served: an instance tagged with the job id is pending/running and carries a runner id
 *   (its config exists: both paths tag the runner id only after the config is written), so
 *   a redelivered message costs nothing. A stopped instance with the job's tag is a failed
 *   activation, not a served job.
 * - capacity: a pool's runners (active instances pending/running/stopping) plus this
 *   batch's new ones stay within maxRunners; the oldest jobs get the free slots first. The
 *   snapshot is per invocation, so concurrent invocations can overshoot by what they start
 *   between their snapshots (docs/control-plane.md).
 * - warm for as many jobs as the pool has parked instances each may take (`bucketsFor`: a
 *   job of a reusable pool its affinity's, then fresh ones; every other job fresh ones
 *   only), cold for the rest.
 *
 * Candidate order is a hash of (salt, instance id): concurrent invocations pass different
 * salts, so they start their claims on different instances instead of all racing for the
 * first one (every lost race costs an SSM write and a CI registration).
 */
export function decide(
  jobs: readonly QueuedJob[],
  instances: readonly ObservedInstance[],
  config: FleetConfig,
  keys: TagKeys,
  now: Date,
  options: { readonly maxWaitSeconds: number; readonly salt: string },
): Plan {
  const decisions = new Map<string, Decision>();
  const servedBy = new Map<string, string[]>();
  const runners = new Map<string, number>();
  const parked = parkedByBucket(instances, keys);
  for (const i of instances) {
    const pool = i.tags.get(keys.pool);
    if (pool === undefined) continue;
    const job = i.tags.get(keys.jobId);
    if (job !== undefined && (i.state === 'pending' || i.state === 'running') && i.tags.has(keys.runnerId)) servedBy.set(job, [...(servedBy.get(job) ?? []), i.id]);
    const cls = classify(i, keys, false);
    if (cls === 'active' && RUNNING.has(i.state)) runners.set(pool, (runners.get(pool) ?? 0) + 1);
  }
  const candidates = orderCandidates(parked, options.salt);

  const seen = new Set<string>();
  const byAge = [...jobs].sort((a, b) => Date.parse(a.job.receivedAt) - Date.parse(b.job.receivedAt));
  const warmLeft = new Map<string, number>();
  for (const q of byAge) {
    const served = servedBy.get(q.job.jobId)?.find((id) => !q.superseded?.includes(id));
    if (served !== undefined) {
      decisions.set(q.key, { kind: 'served', instanceId: served });
      continue;
    }
    if (seen.has(q.job.jobId)) {
      decisions.set(q.key, { kind: 'duplicate' });
      continue;
    }
    seen.add(q.job.jobId);
    const pool: PoolConfig | undefined = config.pools.find((p) => p.name === q.pool);
    if (!pool) {
      decisions.set(q.key, { kind: 'unknown-pool' });
      continue;
    }
    const used = runners.get(pool.name) ?? 0;
    if (used >= pool.maxRunners) {
      const ageSeconds = (now.getTime() - Date.parse(q.job.receivedAt)) / 1000;
      decisions.set(q.key, { kind: ageSeconds > options.maxWaitSeconds ? 'expired' : 'wait' });
      continue;
    }
    runners.set(pool.name, used + 1);
    const bucket = bucketsFor(pool.name, reuseAffinityOf(pool, q.job)).find((k) => (warmLeft.get(k) ?? candidates.get(k)?.length ?? 0) > 0);
    if (bucket !== undefined) warmLeft.set(bucket, (warmLeft.get(bucket) ?? candidates.get(bucket)!.length) - 1);
    decisions.set(q.key, { kind: bucket !== undefined ? 'warm' : 'cold' });
  }
  return { decisions, candidates };
}

/**
 * What one pool's back-off lets this batch launch cold (lambdas/pool/backoff.ts `coldGate`),
 * from the stored streak and the pool's instances: `instances` must include the pool's gone
 * instances that carry a start failure or a job start (scale-up's extra, filtered look).
 */
export function poolColdGate(
  stored: PrimeStreak | undefined | 'unreadable',
  pool: PoolConfig,
  instances: readonly ObservedInstance[],
  keys: TagKeys,
  wanted: number,
  now: Date,
): ColdGate {
  const mine = instances.filter((i) => i.tags.get(keys.pool) === pool.name);
  const starts = observeStarts(mine, keys, pool, stored === 'unreadable' ? undefined : stored);
  const classes = mine.map((i) => ({ i, cls: classify(i, keys, false) }));
  const numbered = /^\d+$/.test(pool.launchTemplateVersion);
  const parkedLaunchTimes = classes
    .filter(({ i, cls }) => cls === 'parked' && !(numbered && templateVersionOf(i) !== undefined && templateVersionOf(i) !== pool.launchTemplateVersion))
    .map(({ i }) => i.launchTime);
  const priming = classes.filter(({ cls }) => cls === 'priming').length;
  return coldGate(stored, pool, { starts, priming, parkedLaunchTimes }, wanted, now);
}

export type ColdVerdict =
  | { readonly kind: 'cold' }
  /** The pool backs off: the job waits for the next probe (a wait copy), no launch. */
  | { readonly kind: 'hold'; readonly held: NonNullable<ColdGate['held']>; readonly resumeAt?: Date }
  /** Held past the job's maximum wait: dead-letter it. */
  | { readonly kind: 'hold-expired'; readonly held: NonNullable<ColdGate['held']> };

/**
 * Which of the batch's cold jobs launch, given each pool's gate: the oldest first take the
 * launches the gate allows; the rest wait (not lost, no launch), or go to the dead-letter
 * queue once they have waited longer than the maximum age, as capacity waits do.
 */
export function gateCold(
  jobs: readonly { readonly key: string; readonly pool: string; readonly receivedAt: string }[],
  gates: ReadonlyMap<string, ColdGate>,
  now: Date,
  maxWaitSeconds: number,
): Map<string, ColdVerdict> {
  const verdicts = new Map<string, ColdVerdict>();
  const left = new Map([...gates].map(([pool, g]) => [pool, g.launch]));
  for (const j of [...jobs].sort((a, b) => Date.parse(a.receivedAt) - Date.parse(b.receivedAt))) {
    const gate = gates.get(j.pool);
    const n = left.get(j.pool) ?? Infinity;
    if (!gate || n > 0) {
      left.set(j.pool, n - 1);
      verdicts.set(j.key, { kind: 'cold' });
      continue;
    }
    const held = gate.held ?? 'backoff';
    const expired = (now.getTime() - Date.parse(j.receivedAt)) / 1000 > maxWaitSeconds;
    verdicts.set(j.key, expired ? { kind: 'hold-expired', held } : { kind: 'hold', held, ...(gate.resumeAt ? { resumeAt: gate.resumeAt } : {}) });
  }
  return verdicts;
}

/**
 * The verdicts of cold jobs the gate let launch but that got no launch ticket (another
 * launcher won the slot, or the table did not answer): they wait as held jobs do, or go to
 * the dead-letter queue past their maximum wait.
 */
export function heldWithoutTicket(
  jobs: readonly { readonly key: string; readonly pool: { readonly name: string }; readonly job: { readonly receivedAt: string } }[],
  gates: ReadonlyMap<string, ColdGate>,
  now: Date,
  maxWaitSeconds: number,
): Map<string, ColdVerdict> {
  const verdicts = new Map<string, ColdVerdict>();
  for (const j of jobs) {
    const gate = gates.get(j.pool.name);
    const held = gate?.held ?? (gate?.ticket?.slots[0]?.startsWith('probe#') ? 'backoff' : 'unproven');
    const expired = (now.getTime() - Date.parse(j.job.receivedAt)) / 1000 > maxWaitSeconds;
    verdicts.set(j.key, expired ? { kind: 'hold-expired', held } : { kind: 'hold', held, ...(gate?.resumeAt ? { resumeAt: gate.resumeAt } : {}) });
  }
  return verdicts;
}
