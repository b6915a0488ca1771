import { isProvider, type Provider } from './boot';
import { poolNameProblem } from './names';

export const JOB_MESSAGE_SCHEMA_VERSION = 1;

/** A queued CI job, as the webhook writes it to the jobs queue and scale-up reads it. */
export interface JobMessage {
  readonly schemaVersion: typeof JOB_MESSAGE_SCHEMA_VERSION;
  readonly provider: Provider;
  /** Provider-qualified id (`qualifiedJobId`), since GitHub and GitLab job ids can collide. */
  readonly jobId: string;
  /** The job's own id at its provider. */
  readonly providerJobId: string;
  /** Pool the job's labels matched; undefined while its labels are unresolved. */
  readonly pool?: string;
  /** GitHub: organisation or user; GitLab: the project's namespace path. */
  readonly owner: string;
  /** GitHub: repository name; GitLab: project path within the namespace. */
  readonly project: string;
  /** GitLab numeric project id (the jobs API is addressed by it). */
  readonly projectId?: number;
  /** GitHub labels or GitLab tags of the job; empty and `labelsResolved: false` when unknown. */
  readonly labels: readonly string[];
  /** False when the webhook could not look up the job's tags in time (GitLab); scale-up resolves them. */
  readonly labelsResolved: boolean;
  /** Born at the webhook, carried to the instance's tags and every boot log line. */
  readonly traceId: string;
  /** The provider's delivery id (X-GitHub-Delivery, webhook-id), used for de-duplication. */
  readonly deliveryId: string;
  /** ISO 8601 time the webhook received the job; bounds how long a job may wait for capacity. */
  readonly receivedAt: string;
  /**
   * ISO 8601 time the provider created the job, when the delivery said (GitHub
   * `workflow_job.created_at`, GitLab `build_created_at`): a delivery about a job older than
   * `LATE_DELIVERY_SECONDS` (a redelivery or a resent hook event) is checked at the provider
   * before a runner is registered for it.
   */
  readonly createdAt?: string;
}

/**
 * Age past which a job's delivery counts as late: SQS FIFO's deduplication window, after
 * which a copy of a delivery is no longer dropped by the queue. A late delivery may be about a
 * job that finished long ago (a GitLab hook event resent days later), so scale-up asks the
 * provider whether the job is still queued before it serves it, as for a redelivery.
 */
export const LATE_DELIVERY_SECONDS = 300;

/**
 * The delivery id (and so the trace id) of a job the reconciler found, the same on every run:
 * `reconciler-<provider>-<job id>`. No provider's delivery id starts so (GitHub's and
 * GitLab's are UUIDs), so the prefix tells a reconciled copy from a delivered one.
 */
export function reconciledDeliveryId(provider: Provider, providerJobId: string): string {
  return `${RECONCILED_DELIVERY_PREFIX}${provider}-${providerJobId}`;
}

const RECONCILED_DELIVERY_PREFIX = 'reconciler-';

/** Whether a job message is the reconciler's copy (its delivery id is `reconciledDeliveryId`'s). */
export function isReconciled(message: Pick<JobMessage, 'deliveryId'>): boolean {
  return message.deliveryId.startsWith(RECONCILED_DELIVERY_PREFIX);
}

export function qualifiedJobId(provider: Provider, providerJobId: string | number): string {
  return `${provider}:${providerJobId}`;
}

/**
 * The jobs queue's and the dead-letter queue's `MaximumMessageSize`, set by the construct
 * (lib/job-queue.ts). SQS raised its ceiling from 256 KiB to 1 MiB in August 2025 (CreateQueue
 * `MaximumMessageSize`: 1,024 to 1,048,576 bytes, default 1 MiB, per the SDK's API docs); the
 * construct keeps 256 KiB, which every SQS queue and consumer accepts.
 */
export const QUEUE_MAX_MESSAGE_BYTES = 262_144;

/**
 * Room for the message attributes scale-up adds when it sends a job's body again (a capacity
 * wait's `capacity-waits` and `not-before`, a dead-letter reason): SQS counts attributes
 * toward the limit. A few hundred bytes today.
 */
export const JOB_MESSAGE_ATTRIBUTE_HEADROOM_BYTES = 1_024;

/**
 * Largest jobs-queue message the webhook sends, in bytes of the UTF-8 body (it sends no
 * attributes). moto 5.2.1 enforces the queue's `MaximumMessageSize` (default 1 MiB), so the
 * webhook checks this bound itself rather than learning it from a refused send.
 */
export const JOB_MESSAGE_MAX_BYTES = QUEUE_MAX_MESSAGE_BYTES - JOB_MESSAGE_ATTRIBUTE_HEADROOM_BYTES;

/** Message attribute naming why a message is in the dead-letter queue. */
export const DEAD_LETTER_REASON_ATTRIBUTE = 'dead-letter-reason';

const TRACE_ID_PATTERN = /^[A-Za-z0-9._-]{1,64}$/;
const MAX_LABELS = 64;

/**
 * Parses and validates a queue message body. Throws an Error naming the first bad field;
 * the caller decides whether that dead-letters the message.
 */
export function parseJobMessage(body: string): JobMessage {
  let raw: unknown;
  try {
    raw = JSON.parse(body);
  } catch {
    throw new Error('job message is not JSON');
  }
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) throw new Error('job message is not a JSON object');
  const m = raw as Record<string, unknown>;
  const fail = (field: string, why: string): never => {
    throw new Error(`job message field "${field}" ${why}`);
  };
  const str = (field: string): string => {
    const v = m[field];
    if (typeof v !== 'string' || v === '') fail(field, 'must be a non-empty string');
    return v as string;
  };
  if (m.schemaVersion !== JOB_MESSAGE_SCHEMA_VERSION) fail('schemaVersion', `must be ${JOB_MESSAGE_SCHEMA_VERSION}`);
  const provider = m.provider;
  if (!isProvider(provider)) return fail('provider', 'must be "github" or "gitlab"');
  const providerJobId = str('providerJobId');
  const jobId = str('jobId');
  if (jobId !== qualifiedJobId(provider, providerJobId)) fail('jobId', `must be "${qualifiedJobId(provider, providerJobId)}"`);
  let pool: string | undefined;
  if (m.pool !== undefined) {
    pool = str('pool');
    const problem = poolNameProblem(pool);
    if (problem) fail('pool', problem);
  }
  const labels = m.labels;
  if (!Array.isArray(labels) || labels.length > MAX_LABELS || !labels.every((l) => typeof l === 'string' && l !== '')) {
    fail('labels', `must be an array of at most ${MAX_LABELS} non-empty strings`);
  }
  if (typeof m.labelsResolved !== 'boolean') fail('labelsResolved', 'must be a boolean');
  let projectId: number | undefined;
  if (m.projectId !== undefined) {
    if (!Number.isSafeInteger(m.projectId) || (m.projectId as number) <= 0) fail('projectId', 'must be a positive integer');
    projectId = m.projectId as number;
  }
  const traceId = str('traceId');
  if (!TRACE_ID_PATTERN.test(traceId)) fail('traceId', 'must be 1-64 characters of letters, digits, ".", "_" or "-"');
  const receivedAt = str('receivedAt');
  if (Number.isNaN(Date.parse(receivedAt))) fail('receivedAt', 'must be an ISO 8601 time');
  let createdAt: string | undefined;
  if (m.createdAt !== undefined) {
    createdAt = str('createdAt');
    if (Number.isNaN(Date.parse(createdAt))) fail('createdAt', 'must be an ISO 8601 time');
  }
  return {
    schemaVersion: JOB_MESSAGE_SCHEMA_VERSION,
    provider,
    jobId,
    providerJobId,
    ...(pool === undefined ? {} : { pool }),
    owner: str('owner'),
    project: str('project'),
    ...(projectId === undefined ? {} : { projectId }),
    labels: [...(labels as string[])],
    labelsResolved: m.labelsResolved as boolean,
    traceId,
    deliveryId: str('deliveryId'),
    receivedAt,
    ...(createdAt === undefined ? {} : { createdAt }),
  };
}

export function isTraceId(value: string): boolean {
  return TRACE_ID_PATTERN.test(value);
}
