/**
 * The fleet prefix scopes every SSM path and every tag key, so two fleets in one
 * account never see each other's instances or parameters.
 *
 * It must be valid in three places at once: an SSM path segment ([a-zA-Z0-9_.-]),
 * an EC2 tag key readable through instance metadata (no "/" and no spaces, see
 * "Work with instance tags in instance metadata" in the EC2 user guide), and a
 * shell word in the rendered boot script. SSM rejects names that begin with
 * "aws" or "ssm"; EC2 reserves tag keys that begin with "aws:".
 */
export const PREFIX_PATTERN = /^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,31}$/;

/** Pool names become tag values, runner names and metric dimensions. */
export const POOL_NAME_PATTERN = /^[a-zA-Z0-9][a-zA-Z0-9_-]{0,31}$/;

/** EC2 instance ids as EC2 and moto issue them. */
export const INSTANCE_ID_PATTERN = /^i-[0-9a-f]{8,17}$/;

export const DEFAULT_PREFIX = 'warm-runners';

/** Returns an actionable message when `prefix` cannot be used, undefined when it can. */
export function prefixProblem(prefix: string): string | undefined {
  if (!PREFIX_PATTERN.test(prefix)) {
    return `prefix "${prefix}" must be 1-32 characters of letters, digits, "_", "." or "-", starting with a letter or digit (it is used in SSM paths and in instance-metadata tag keys, which reject "/" and spaces)`;
  }
  if (/^(aws|ssm)/i.test(prefix)) {
    return `prefix "${prefix}" must not begin with "aws" or "ssm": SSM reserves those parameter names and EC2 reserves "aws:" tag keys`;
  }
  return undefined;
}

export function assertPrefix(prefix: string): void {
  const problem = prefixProblem(prefix);
  if (problem) throw new Error(problem);
}

export function poolNameProblem(name: string): string | undefined {
  if (!POOL_NAME_PATTERN.test(name)) {
    return `pool name "${name}" must be 1-32 characters of letters, digits, "_" or "-", starting with a letter or digit (it becomes a tag value, a runner name and a metric dimension)`;
  }
  return undefined;
}

/**
 * What reuse's `affinityOf` (contract reuse.ts) produces, as an ERE: the boot script checks
 * the same pattern (rendered), and the runner config codec here.
 */
export const AFFINITY_PATTERN = '^(github:[a-z0-9_.-]+/[a-z0-9_.-]+|gitlab:[0-9]+)$';
