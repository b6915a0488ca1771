/**
 * The runner scale set intake (docs/scale-set.md): what the listener, scale-up, the scale-set
 * resource and the loopback GitHub share. The wire format itself lives in the client
 * (`lambdas/ci/scale-set/`), learnt from `actions/scaleset` (client.go, session_client.go,
 * types.go, listener/listener.go).
 */

/**
 * A scale set's statistics as each message (and a session's answer, when it has them) carries
 * them (`types.go` `RunnerScaleSetStatistic` declares the fields). `totalAssignedJobs` counts the
 * jobs GitHub has assigned to the scale set and not yet completed, running ones included: the
 * meaning the example autoscaler gives it (`examples/dockerscaleset/scaler.go`
 * `HandleDesiredRunnerCount` compares it with its idle plus busy runners).
 */
export interface ScaleSetStatistics {
  readonly totalAvailableJobs: number;
  readonly totalAcquiredJobs: number;
  readonly totalAssignedJobs: number;
  readonly totalRunningJobs: number;
  readonly totalRegisteredRunners: number;
  readonly totalBusyRunners: number;
  readonly totalIdleRunners: number;
}

/** A job-started or job-completed message, as far as the fleet reads it. */
export interface ScaleSetJobEvent {
  readonly kind: 'started' | 'completed';
  /** The runner GitHub handed the job (the fleet's runner name, so the instance is found from it). */
  readonly runnerName: string;
  readonly runnerId: number;
  readonly jobId: string;
  /** job-completed only: "succeeded", "failed", "canceled", ... */
  readonly result?: string;
}

/** One answer of GetMessage that carried a message. */
export interface ScaleSetMessage {
  readonly messageId: number;
  readonly statistics: ScaleSetStatistics;
  readonly events: readonly ScaleSetJobEvent[];
}

/** A message session (`RunnerScaleSetSession`). The queue token is a secret: never logged or stored. */
export interface ScaleSetSession {
  readonly sessionId: string;
  readonly scaleSetId: number;
  readonly messageQueueUrl: string;
  readonly messageQueueAccessToken: string;
  /**
   * The scale set's statistics when the answer carried them. `types.go` declares the session's
   * `Statistics` a pointer (it may be absent: the client's listener checks for nil), so a
   * session without them is still a session; the listener then waits for the first message.
   */
  readonly statistics?: ScaleSetStatistics;
}

/** What a pool's scale set is at GitHub. */
export interface ScaleSetSpec {
  /** The scale set's name: what workflows put in `runs-on`. */
  readonly name: string;
  /** The runner group it belongs to (GitHub's "Default" unless named). */
  readonly runnerGroup: string;
  /** Labels besides the name (the pool's labels). */
  readonly labels: readonly string[];
}

/** Another holder has an active session for the scale set (HTTP 409 on create). */
export class SessionConflictError extends Error {
  constructor(readonly scaleSetId: number, detail: string) {
    super(`scale set ${scaleSetId}: another message session is active (${detail})`);
    this.name = 'SessionConflictError';
  }
}

/** The message queue token has expired (HTTP 401 on GetMessage/DeleteMessage): refresh the session. */
export class QueueTokenExpiredError extends Error {
  constructor(readonly scaleSetId: number) {
    super(`scale set ${scaleSetId}: the message queue token has expired`);
    this.name = 'QueueTokenExpiredError';
  }
}

/**
 * The session is gone at GitHub: a refresh refused with any status but 401, 429 or 5xx (the
 * source shows no status of its own for an expired session: `session_client.go` takes every
 * unexpected status as an error), or a 404 on GetMessage/DeleteMessage. Create a new one.
 */
export class SessionGoneError extends Error {
  constructor(readonly scaleSetId: number, readonly sessionId: string) {
    super(`scale set ${scaleSetId}: message session ${sessionId} no longer exists`);
    this.name = 'SessionGoneError';
  }
}

/**
 * The scale-set half of GitHub, per scope (an organisation or a repository): implemented by
 * `lambdas/ci/scale-set/client.ts`; tests use doubles. Every method resolves a lost answer
 * by reading back where the call mutates (a create reads the scale set back by name).
 */
export interface ScaleSetApi {
  /** The scale set named `spec.name` in its runner group, created or updated to `spec`. */
  ensureScaleSet(spec: ScaleSetSpec): Promise<{ readonly id: number }>;
  /** The id of the scale set named so, or undefined when there is none. */
  findScaleSet(name: string, runnerGroup: string): Promise<{ readonly id: number } | undefined>;
  /** Deletes the scale set; resolves when it is already gone. */
  deleteScaleSet(id: number): Promise<void>;
  /** Throws `SessionConflictError` while another session is active. `owner` names the holder. */
  createSession(scaleSetId: number, owner: string): Promise<ScaleSetSession>;
  /** A fresh queue token for an existing session; throws `SessionGoneError` when it is gone. */
  refreshSession(scaleSetId: number, sessionId: string): Promise<ScaleSetSession>;
  /** Resolves when the session is already gone. */
  deleteSession(scaleSetId: number, sessionId: string): Promise<void>;
  /**
   * Long-polls the queue for the message after `lastMessageId`; undefined when the poll ended
   * with none (HTTP 202). `maxCapacity` is sent as `X-ScaleSetMaxCapacity`. Throws
   * `QueueTokenExpiredError` on 401. `signal` ends the poll early (no message is lost: an
   * unacknowledged message is delivered again).
   */
  getMessage(session: ScaleSetSession, lastMessageId: number, maxCapacity: number, signal?: AbortSignal): Promise<ScaleSetMessage | undefined>;
  /** Acknowledges (deletes) a message; throws `QueueTokenExpiredError` on 401. */
  deleteMessage(session: ScaleSetSession, messageId: number): Promise<void>;
  /** A JIT config for one runner of the scale set, named `runnerName`. `encodedJitConfig` is a secret. */
  generateJitConfig(scaleSetId: number, runnerName: string): Promise<{ readonly runnerId: number; readonly encodedJitConfig: string }>;
}

/**
 * What the listener asks of scale-up (a synchronous invocation): bring the pool's scale-set
 * runners up to what `assignedJobs` needs. Scale-up recomputes the shortfall from the
 * instances it observes (`scaleSetShortfall`), so an invocation repeated, lost or overlapping
 * another starts no runner twice for one job.
 */
export interface ScaleSetDemand {
  readonly kind: 'scale-set-demand';
  readonly pool: string;
  readonly scaleSetId: number;
  /** `totalAssignedJobs` of the newest statistics. */
  readonly assignedJobs: number;
  /** The listener's trace id for this reading (tags, logs). */
  readonly traceId: string;
  /**
   * The runners the listener's earlier demands started (their `startedRunners`), for
   * `SCALE_SET_RECENT_START_MS` after each start: EC2's reads lag its writes, so an instance
   * just launched or activated may be missing from scale-up's next observation, or still look
   * parked. Scale-up counts each one it does not observe as an active runner of the pool as a
   * runner all the same, so back-to-back demands start no second runner for one job.
   */
  readonly recentlyStarted?: readonly ScaleSetStartedRunner[];
}

/** A runner a demand started: its instance and when (ISO 8601). Not secret: kept in the lease item. */
export interface ScaleSetStartedRunner {
  readonly instanceId: string;
  readonly startedAt: string;
}

/**
 * How long a started runner is carried from demand to demand (`ScaleSetDemand.recentlyStarted`):
 * EC2's DescribeInstances is eventually consistent with RunInstances/CreateFleet, StartInstances
 * and CreateTags ("Eventual consistency in the Amazon EC2 API": usually seconds, at times
 * longer), so three minutes covers the lag with room, while a runner that never came (its
 * instance terminated at boot) stops holding a job's place soon after.
 */
export const SCALE_SET_RECENT_START_MS = 3 * 60_000;

/**
 * Scale-up's timeout in seconds (the construct's `ScaleUp` function): the listener's
 * synchronous invocation waits longer than it, and after an invocation whose outcome it does not
 * know it keeps the lease until this has passed, so no next holder's demand runs beside it.
 */
export const SCALE_UP_TIMEOUT_SECONDS = 60;

/** Scale-up's answer to a `ScaleSetDemand`. */
export interface ScaleSetDemandResult {
  /** Runners the observed state already had for the pool's scale set (starting, idle or busy). */
  readonly observed: number;
  /** Runners scale-up started for the shortfall (warm activations and cold launches). */
  readonly started: number;
  /** Shortfall left unserved (capacity, back-off, the pool's bound): the next reading retries. */
  readonly unserved: number;
  /** The runners this demand started (one per `started`), for the listener's next demands (`recentlyStarted`). */
  readonly startedRunners?: readonly ScaleSetStartedRunner[];
}

export function isScaleSetDemand(event: unknown): event is ScaleSetDemand {
  return typeof event === 'object' && event !== null && (event as { kind?: unknown }).kind === 'scale-set-demand';
}

/**
 * The job id scale-up tags on a runner it starts for a scale set's demand: no job is known
 * when the runner starts (GitHub hands it whichever assigned job), so the id names the
 * reading (its trace id) and the slot of the shortfall instead. It starts with the provider's
 * `github:` like every job id, and can never be one of GitHub's (numeric) job ids.
 */
export function scaleSetJobId(scaleSetId: number, traceId: string, slot: number): string {
  return `github:scale-set-${scaleSetId}-${traceId}-${slot}`;
}

/** Lease items live in the fleet's table under this key prefix; the listener's role may touch no other key. */
export const SCALE_SET_LEASE_KEY_PREFIX = 'scale-set-lease|';

export function scaleSetLeaseKey(pool: string): string {
  return `${SCALE_SET_LEASE_KEY_PREFIX}${pool}`;
}

/** Attributes of a lease item (besides the table's key, `JOB_RECORD_ATTRIBUTES.key`). */
export const SCALE_SET_LEASE_ATTRIBUTES = {
  /** The invocation holding the lease (its request id). */
  holder: 'leaseHolder',
  /** Epoch seconds after which another poller may take the lease. */
  expiresAt: 'leaseExpiresAt',
  /** The session the holder left open for the next one (not secret: a refresh needs the App). */
  sessionId: 'sessionId',
  scaleSetId: 'scaleSetId',
  /** The last message id acknowledged, so a new holder asks for the next one. */
  lastMessageId: 'lastMessageId',
  /** Epoch seconds at which the holder plans to give the lease up (the hand-over the next invocation waits for). */
  releaseAt: 'leaseReleaseAt',
  /** The runners recent demands started (JSON of `ScaleSetStartedRunner[]`), so a new holder's demands count them too. */
  recentlyStarted: 'recentlyStarted',
} as const;
