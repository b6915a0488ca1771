import type { Provider } from '../shared/contract';

/** What a verified delivery asks for, before the pool is chosen. */
export interface JobDraft {
  readonly provider: Provider;
  readonly providerJobId: string;
  readonly owner: string;
  readonly project: string;
  readonly projectId?: number;
  /** GitHub: the job's labels. GitLab: empty until the tags are looked up. */
  readonly labels: readonly string[];
  /** ISO 8601 time the provider created the job, when the payload carries a readable one. */
  readonly createdAt?: string;
}

/**
 * A job the CI provider reports started (GitHub `in_progress`, GitLab `running`): the last
 * stage of its latency ledger, from a delivery the webhook receives anyway and does not queue.
 */
export interface JobStart {
  readonly provider: Provider;
  readonly providerJobId: string;
  /** When the provider created (queued) the job, and when it started it: ISO 8601 or GitLab's "YYYY-MM-DD hh:mm:ss UTC". */
  readonly createdAt: string;
  readonly startedAt: string;
  /** The runner that took it: its name (GitHub) or description (GitLab), which carries our instance id. */
  readonly runnerName: string;
  /** Labels to find the pool by: the job's (GitHub) or its runner's tags (GitLab; the Job Hook carries no job tags). */
  readonly labels: readonly string[];
}

export type Classified =
  | { readonly kind: 'job'; readonly job: JobDraft }
  | { readonly kind: 'ignore'; readonly reason: string; readonly started?: JobStart }
  | { readonly kind: 'invalid'; readonly reason: string };

export const ignore = (reason: string, started?: JobStart): Classified => ({ kind: 'ignore', reason, ...(started ? { started } : {}) });

/** The job's start, when the delivery carries one whose times parse. */
export function jobStartOf(fields: Omit<JobStart, 'createdAt' | 'startedAt'> & { createdAt: unknown; startedAt: unknown }): JobStart | undefined {
  const createdAt = isoTime(fields.createdAt);
  const startedAt = isoTime(fields.startedAt);
  if (createdAt === undefined || startedAt === undefined) return undefined;
  if (fields.runnerName === '') return undefined;
  return { ...fields, createdAt, startedAt };
}
export const invalid = (reason: string): Classified => ({ kind: 'invalid', reason });

export function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

export function positiveInteger(value: unknown): number | undefined {
  return Number.isSafeInteger(value) && (value as number) > 0 ? (value as number) : undefined;
}

export function nonEmptyString(value: unknown): string | undefined {
  return typeof value === 'string' && value !== '' ? value : undefined;
}

/**
 * The first of `values` that is a readable time, as ISO 8601 UTC. An unreadable one is not a
 * reason to refuse the job: it only costs the delivery its lateness check.
 */
export function isoTime(...values: unknown[]): string | undefined {
  for (const value of values) {
    const text = nonEmptyString(value);
    const ms = text === undefined ? NaN : Date.parse(text);
    if (!Number.isNaN(ms)) return new Date(ms).toISOString();
  }
  return undefined;
}

/** `{ createdAt }` of a job's creation time when it is readable, else nothing (a draft's optional field). */
export function createdAtOf(value: unknown): { createdAt?: string } {
  const createdAt = isoTime(value);
  return createdAt === undefined ? {} : { createdAt };
}
