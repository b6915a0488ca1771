/**
 * The seeded fault plan of `npm run local -- --faults` (issue 11, "Prove it locally"): which
 * job deliveries are dropped before the webhook, which are answered 5xx, which GitHub jobs get
 * a stray runner, and which GitLab job is cancelled. Pure: the same seed and job counts give the same plan,
 * so a failing run is replayed with its `--seed`.
 */

/** delivered: the webhook gets it; dropped: never attempted (no delivery record); failed: the provider logs a 5xx. */
export type DeliveryFate = 'delivered' | 'dropped' | 'failed';

/** At least these shares of the jobs' deliveries are dropped and answered 5xx (rounded up). */
export const FAULT_SHARES = { dropped: 0.2, failed: 0.1 } as const;
/** The seed of a run without `--seed`. */
export const DEFAULT_FAULT_SEED = 1;
/** GitHub jobs the plan needs delivered: one whose runner takes another's job, one whose runner dies. */
const GITHUB_SPECIALS = 2;

export interface FaultPlan {
  readonly seed: number;
  /** Per provider, the fate of each job's delivery, in the order the jobs are created. */
  readonly fates: { readonly github: readonly DeliveryFate[]; readonly gitlab: readonly DeliveryFate[] };
  /** Indexes of GitHub jobs (both delivered): their first runner takes another job's job / dies before taking one. */
  readonly takesAnother: number;
  readonly dies: number;
  /** Index of the GitLab job (delivered) cancelled after its delivery. */
  readonly cancelled: number;
}

/** mulberry32: a small, well-mixed 32-bit generator; plenty for shuffling a few dozen jobs. */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function shuffle<T>(items: readonly T[], random: () => number): T[] {
  const out = [...items];
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [out[i], out[j]] = [out[j]!, out[i]!];
  }
  return out;
}

/** The plan for `jobs` jobs per provider; throws when they are too few to hold every fault. */
export function planFaults(seed: number, jobs: number): FaultPlan {
  const { dropped, failed } = faultCounts(jobs);
  if (!holdsEveryFault(jobs)) {
    throw new Error(`the fault plan needs at least ${minimumJobs()} jobs per provider, got ${jobs}`);
  }
  const random = seededRandom(seed);
  const github = shuffle([...Array(jobs).keys()], random);
  const [takesAnother, dies] = github as [number, number];
  const gitlab = shuffle([...Array(jobs).keys()], random);
  const cancelled = gitlab[0]!;
  // GitHub's first fault is a drop (only its queued-runs fallback finds the job) and GitLab's a
  // 5xx (only a hook-event resend or its listing does); the rest alternate between the providers
  // (GitHub first, a 5xx first) while both have jobs left. Which job is the seed's.
  const open = { github: github.slice(GITHUB_SPECIALS), gitlab: gitlab.slice(1) };
  const fates = { github: Array<DeliveryFate>(jobs).fill('delivered'), gitlab: Array<DeliveryFate>(jobs).fill('delivered') };
  fates.github[open.github.shift()!] = 'dropped';
  fates.gitlab[open.gitlab.shift()!] = 'failed';
  const faults: DeliveryFate[] = [...Array<DeliveryFate>(failed - 1).fill('failed'), ...Array<DeliveryFate>(dropped - 1).fill('dropped')];
  faults.forEach((fate, k) => {
    const preferred = k % 2 === 0 ? 'github' : 'gitlab';
    const p = open[preferred].length > 0 ? preferred : preferred === 'github' ? 'gitlab' : 'github';
    fates[p][open[p].shift()!] = fate;
  });
  return { seed, fates, takesAnother, dies, cancelled };
}

/** The fewest jobs per provider a plan holds every fault with. */
export function minimumJobs(): number {
  for (let n = GITHUB_SPECIALS; ; n++) if (holdsEveryFault(n)) return n;
}

/** Whether `jobs` per provider leave, past the stray GitHub jobs and the cancelled one, a job for each dropped and 5xx delivery. */
function holdsEveryFault(jobs: number): boolean {
  const { dropped, failed } = faultCounts(jobs);
  return jobs >= GITHUB_SPECIALS && 2 * jobs - GITHUB_SPECIALS - 1 >= dropped + failed;
}

/** The dropped and 5xx deliveries of `jobs` per provider: the shares of both providers' jobs, rounded up. */
function faultCounts(jobs: number): { readonly dropped: number; readonly failed: number } {
  return { dropped: Math.ceil(2 * jobs * FAULT_SHARES.dropped), failed: Math.ceil(2 * jobs * FAULT_SHARES.failed) };
}
