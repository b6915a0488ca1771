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
}

export type Classified =
  | { readonly kind: 'job'; readonly job: JobDraft }
  | { readonly kind: 'ignore'; readonly reason: string }
  | { readonly kind: 'invalid'; readonly reason: string };

export const ignore = (reason: string): Classified => ({ kind: 'ignore', reason });
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
