/**
 * Reuse of a finished instance for the next job of the same trust scope (opt-in per pool):
 * what the control plane and the boot script agree on. docs/boot-modes.md ("Reuse") and
 * docs/security.md say what survives a job and what does not.
 *
 * Design notes (invariants; each has a test that fails when it is broken):
 * R1. An instance that ran a job of scope S is only ever handed a job of scope S again: the
 *     runner of a reusable pool is registered for S alone (a repository-level JIT config, a
 *     `project_type` GitLab runner), scale-up never offers it to another scope, and the boot
 *     script refuses a config whose affinity differs from the one it parked with.
 * R2. The claim stays the one refuse-to-overwrite SSM write at the instance's config name: a
 *     job claim, a pool eviction marker and an idle-stop marker exclude one another.
 * R3. Every signal names the activation it belongs to (the activated-at value): a tag,
 *     marker or parameter of an earlier activation never drives a decision in a later one.
 * R4. Resume fails loud: an instance whose preserved state is not what it parked with (cache
 *     directory missing, use count or affinity differing, a marker of a job in progress) is
 *     not served a job; it terminates and the job is served elsewhere.
 * R5. A reusable instance parks only after it cleaned itself; when cleaning fails, a limit is
 *     reached, or a tag cannot be written, it terminates instead.
 */
import type { JobMessage } from './job-message';
import { Provider } from './boot';
export { AFFINITY_PATTERN } from './names';

/** Who may share an instance's caches: one GitHub repository, or one GitLab project. */
export enum ReuseScope {
  /** GitHub: jobs of the same repository (`owner/name`). */
  REPOSITORY = 'repository',
  /** GitLab: jobs of the same project (by numeric project id). */
  PROJECT = 'project',
}

/** The scope each provider supports: nothing wider is offered. */
export const REUSE_SCOPE_OF: Readonly<Record<Provider, ReuseScope>> = {
  [Provider.GITHUB]: ReuseScope.REPOSITORY,
  [Provider.GITLAB]: ReuseScope.PROJECT,
};

/** One pool's reuse settings as the FleetConfig carries them (absent: no reuse). */
export interface PoolReuseConfig {
  readonly scope: ReuseScope;
  /** Jobs one instance serves at most; after the last it terminates instead of parking. */
  readonly maxJobs: number;
  /** Seconds from launch after which an instance terminates instead of parking again. */
  readonly maxAgeSeconds: number;
  /** Absolute directories that survive from one job to the next; everything else the job touched is removed. */
  readonly cacheDirectories: string[];
}

export const REUSE_DEFAULTS = {
  maxJobs: 10,
  maxAgeSeconds: 24 * 60 * 60,
  /**
   * Seconds a reusable instance whose runner ended may spend cleaning before it parks: the
   * sweep leaves an instance tagged `parking` for its current activation alone this long.
   */
  parkSeconds: 10 * 60,
} as const;

export const REUSE_LIMITS = {
  maxJobs: 1000,
  minAgeSeconds: 300,
  maxAgeSeconds: 30 * 24 * 60 * 60,
  cacheDirectories: 16,
  /** All directories together, bytes: they are rendered into the user data (16 KB, gzipped). */
  cacheDirectoriesTotal: 512,
} as const;

/**
 * Cache directories are rendered into the boot script and removed around: absolute, plain
 * path characters, no "." or ".." segment, and never a system directory or one that holds
 * the boot script's own state.
 */
const CACHE_DIR_PATTERN = /^(\/[A-Za-z0-9_.@+-]+)+$/;
const SYSTEM_DIRS = ['/bin', '/boot', '/dev', '/etc', '/lib', '/lib64', '/proc', '/root', '/run', '/sbin', '/sys', '/usr', '/var/lib/cloud', '/var/log'];

/** The message of cache directories whose paths together exceed `REUSE_LIMITS.cacheDirectoriesTotal`. */
export function cacheDirectoriesTotalProblem(total: number): string {
  return `reuse.cacheDirectories total ${total} bytes, at most ${REUSE_LIMITS.cacheDirectoriesTotal} fit in user data: list a common parent directory instead of several`;
}

/** An actionable message when `dir` cannot be a cache directory, undefined when it can. */
export function cacheDirectoryProblem(dir: string): string | undefined {
  if (!CACHE_DIR_PATTERN.test(dir) || dir.length > 200) {
    return `cache directory "${dir}" must be an absolute path of letters, digits and "_.@+-" segments, at most 200 characters`;
  }
  if (dir.split('/').some((s) => s === '.' || s === '..')) return `cache directory "${dir}" must not contain "." or ".." segments`;
  const system = SYSTEM_DIRS.find((s) => dir === s || dir.startsWith(`${s}/`) || s.startsWith(`${dir}/`));
  if (system) return `cache directory "${dir}" overlaps the system directory ${system}; use a directory of the runner user's or under /var/cache or /opt`;
  if (dir === '/tmp' || dir === '/var/tmp' || dir.startsWith('/tmp/') || dir.startsWith('/var/tmp/')) {
    return `cache directory "${dir}" is under a temp directory, which is emptied after every job; use /var/cache/... or the runner user's home`;
  }
  return undefined;
}

/**
 * A job's affinity: the trust key of the caches an instance carries after serving it.
 * GitHub `github:<owner>/<repository>` (lower case: GitHub names are case-insensitive);
 * GitLab `gitlab:<project id>` (paths can be renamed, ids cannot). Tag-safe characters.
 */
export function affinityOf(job: Pick<JobMessage, 'provider' | 'owner' | 'project' | 'projectId'>): string {
  if (job.provider === Provider.GITHUB) {
    const repo = `${job.owner}/${job.project}`.toLowerCase();
    if (!/^[a-z0-9_.-]+\/[a-z0-9_.-]+$/.test(repo)) throw new Error(`GitHub repository "${repo}" is not an owner/name pair`);
    return `${Provider.GITHUB}:${repo}`;
  }
  if (job.projectId === undefined || !Number.isSafeInteger(job.projectId) || job.projectId <= 0) {
    throw new Error('a GitLab job without a numeric project id has no reuse affinity');
  }
  return `${Provider.GITLAB}:${job.projectId}`;
}


/**
 * The `parking` tag's value, written by the instance when its runner ended and it begins to
 * clean: `<activated-at> <since>` (both ISO 8601 UTC). It counts only for the activation it
 * names (R3).
 */
export function encodeParking(activatedAt: string, since: Date): string {
  return `${activatedAt} ${since.toISOString()}`;
}

export function parseParking(value: string | undefined): { readonly activatedAt: string; readonly since: Date } | undefined {
  if (value === undefined) return undefined;
  const [activatedAt, since, extra] = value.split(' ');
  if (!activatedAt || !since || extra !== undefined) return undefined;
  const at = new Date(since);
  return Number.isNaN(at.getTime()) ? undefined : { activatedAt, since: at };
}
