import { parseArgs } from 'node:util';
import { dockerUnavailable } from './docker-daemon';
import { DEFAULT_FAULT_SEED, FAULT_SHARES, minimumJobs } from './fault-plan';
import { REUSE_GITHUB_REPOSITORIES, REUSE_GITLAB_PROJECTS } from './reuse-run';
import { LOCAL_IMAGES, SCENARIO_DEFAULTS, type LocalImage, type ScenarioFaults } from './scenario';

/**
 * The command line of `npm run local`, read and checked without side effects (bin/local.ts
 * does the I/O), so every refusal is a table test. A bad flag is a usage error (exit 2) with
 * a message naming the flag, the rule and the value given.
 */

/** Bounds on the counts: each job and each parked instance is a boot script run on this machine. */
export const ARG_LIMITS = { jobs: 50, poolSize: 20, deadlineMin: 10, deadlineMax: 3_600, seed: 2 ** 31 - 1, apps: 5 } as const;

/** `--scale-set`'s own defaults: per path, a job for the parked instance and two after it. */
export const SCALE_SET_DEFAULTS = { jobs: 3, poolSize: 1 } as const;

export const USAGE = `usage: npm run local -- [options]        (npm run -s local -- --json > report.json: -s keeps npm's banner off stdout)
  --jobs N        jobs per CI provider, 0 to ${ARG_LIMITS.jobs} (default ${SCENARIO_DEFAULTS.jobs}: ${SCENARIO_DEFAULTS.jobs} GitHub and ${SCENARIO_DEFAULTS.jobs} GitLab jobs)
  --pool-size N   parked instances per pool, 0 to ${ARG_LIMITS.poolSize} (default ${SCENARIO_DEFAULTS.poolSize}; 0 needs --burst)
  --burst         all jobs at once (beyond the pool: the rest launch cold); default: waves the pools serve warm
  --image I       the machines' image: stock (no runner: PRIME, or a cold boot, installs it from a loopback release server) or prebuilt (runner in place) (default ${SCENARIO_DEFAULTS.image})
  --faults        inject the faults: a refused StartInstances, a never-priming instance, forged and duplicate deliveries, a CI 500,
                  and the lost-job faults: ${Math.round(FAULT_SHARES.dropped * 100)}% of the job deliveries dropped before the webhook, ${Math.round(FAULT_SHARES.failed * 100)}% answered 5xx,
                  a GitHub runner that takes another job's job, one that dies before taking any, a cancelled GitLab job,
                  and GitHub's busy: false mid-job (needs --jobs ${minimumJobs()} or more)
  --seed N        the lost-job faults' plan (with --faults) or the scale set's (with --scale-set), 0 to ${ARG_LIMITS.seed}
                  (default ${DEFAULT_FAULT_SEED}; --scale-set: 1): the same seed, the same faults
  --faults tampered-download
                  every runner download is tampered with (its SHA-256 is not the pinned one): the run passes when the
                  fleet fails safe (pools back off, PrimeBackoff 1, no runner runs, jobs wait or are dead-lettered)
  --drift         publish a new launch template version after the pools filled
  --roll          the pools follow the newest runner release (stock image): after they filled, the loopback release
                  server publishes a newer one; the parked instances roll over before the jobs go, and no job runs
                  the older runner (not with --reuse, --faults, --image prebuilt)
  --reuse         reusable pools (issue 12): two waves of one job per repository (${REUSE_GITHUB_REPOSITORIES.length} GitHub) and project (${REUSE_GITLAB_PROJECTS.length} GitLab),
                  the second after the first parked; the report gives the reuse hit rate and proves each second-wave job
                  found its repository's cache file and nothing else of the earlier job (not with --jobs, --burst, --faults, --drift;
                  as root: each machine gets a runner user of its own)
  --docker        container jobs (needs root, dockerd and busybox-static): the pools keep their Docker, the run starts a Docker
                  daemon of its own for the played machines, and every job is a container job (GitHub container: with a
                  service, GitLab image: with a service, the docker executor); the report proves each ran in its containers
                  and that nothing of them is left on the daemon (not with --reuse or --faults)
  --scopes        one fleet serving several scopes (docs/local.md "Several scopes"): the GitHub jobs alternate between the
                  example's organisation and example-partner (a pool of its own organization, the same labels), the GitLab
                  jobs between two groups (each its own pool, tags and webhook); two GitHub Apps share the load (--apps
                  changes how many) and after half the GitHub jobs the first App's rate-limit budgets are spent; the report
                  names each job's pool and the scope its runner registered in (not with --reuse or --faults)
  --scale-set     runner scale sets (docs/local.md "Scale sets"): a scale-set pool beside the example's GitHub pool, the same
                  labels, no GitLab pool; --jobs GitHub jobs per path (default ${SCALE_SET_DEFAULTS.jobs}, the scale set's name or the pool's labels in
                  runs-on) in two waves, warm then cold; the listener on a short schedule with its faults planned by --seed N
                  (default 1): a poller killed mid-poll, the lease taken, a message delivered again, an acknowledgement lost,
                  the session and the queue token expired; the report proves every assigned job served once, one session and
                  one lease holder at a time, nothing left after the scale set's Delete, and compares the two paths (not with
                  --reuse, --faults, --scopes, --docker, --roll, --drift, --burst, --apt-pool, --apps)
  --apt-pool NAME the example's pool NAME (linux-x64 or gitlab-docker; repeatable) plays an Ubuntu-style image: no dnf, so its
                  install step runs this host's real apt-get (a Debian machine standing in for Ubuntu) beside the other pools'
                  dnf (needs root and the stock image; installs the runner's OS packages that are missing on this host)
  --apps N        GitHub Apps sharing the rate limit, 1 to ${ARG_LIMITS.apps} (default 1): each installed on the loopback organisation with
                  its own key, installation and rate limits; the report counts each App's requests
  --endpoint URL  use this moto server instead of starting one (a fresh one: a moto that holds a fleet is refused)
  --json          print the report as one JSON object
  --verbose       print every event and every Lambda log line as it happens (stderr)
  --deadline S    give up after S seconds, ${ARG_LIMITS.deadlineMin} to ${ARG_LIMITS.deadlineMax} (default ${SCENARIO_DEFAULTS.deadlineMs / 1000} times the machine's slowdown)`;

export class UsageError extends Error {}

export interface LocalArgs {
  readonly help: boolean;
  readonly json: boolean;
  readonly verbose: boolean;
  readonly burst: boolean;
  readonly drift: boolean;
  readonly roll?: true;
  /** Reusable pools and two waves of jobs (absent: off). */
  readonly reuse?: true;
  /** Container jobs on a daemon of the run's own (absent: off). */
  readonly docker?: true;
  /** A second GitHub organisation and GitLab group, two Apps (absent: one of each). */
  readonly scopes?: true;
  /** A scale-set pool beside the webhook pool, the listener and its faults (absent: off). */
  readonly scaleSet?: true;
  readonly jobs?: number;
  readonly poolSize?: number;
  readonly deadlineMs?: number;
  readonly endpoint?: string;
  readonly faults?: ScenarioFaults;
  readonly image?: LocalImage;
  readonly seed?: number;
  /** Pools whose machines play an Ubuntu-style image (apt-get). */
  readonly aptPools?: string[];
  /** GitHub Apps sharing the rate limit (absent: one). */
  readonly apps?: number;
}

/** The fault sets of --faults: alone, the standard set; with a name, that case. */
export const FAULT_SETS = {
  standard: { refuseStart: true, stallPriming: true, badSignature: true, duplicate: true, ciError: true, lossy: true },
  'tampered-download': { tamperedDownload: true },
} as const satisfies Record<string, ScenarioFaults>;

const VALUE_OPTIONS = ['jobs', 'pool-size', 'deadline', 'endpoint', 'seed', 'apps'];
/** Names `--faults` takes as its value when one follows; without one it is the standard set. */
const FAULT_NAMES = Object.keys(FAULT_SETS).filter((n) => n !== 'standard');

/**
 * Reads argv (without node and the script); throws UsageError on anything it cannot run.
 * `root`: whether this process runs as root (what `--reuse` needs), by default its own uid's.
 */
export function parseLocalArgs(argv: readonly string[], root: boolean = process.getuid?.() === 0, dockerMissing: (root: boolean) => string | undefined = (r) => (r ? dockerUnavailable() : 'root: the run starts a Docker daemon of its own (dockerd)')): LocalArgs {
  // `--jobs -1`: parseArgs would call -1 an ambiguous option; joined as `--jobs=-1` it is the
  // value the range check below refuses by name.
  const args: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    const next = argv[i + 1];
    if (VALUE_OPTIONS.includes(a.replace(/^--/, '')) && a.startsWith('--') && next !== undefined && /^-\d/.test(next)) {
      args.push(`${a}=${next}`);
      i++;
    } else if (a === '--faults') {
      // `--faults` alone or followed by a fault's name (anything else after it is the next argument).
      const named = next !== undefined && FAULT_NAMES.includes(next);
      args.push(`--faults=${named ? next : 'standard'}`);
      if (named) i++;
    } else args.push(a);
  }
  let values;
  try {
    ({ values } = parseArgs({
      args,
      options: {
        jobs: { type: 'string' },
        'pool-size': { type: 'string' },
        burst: { type: 'boolean' },
        faults: { type: 'string' },
        image: { type: 'string' },
        drift: { type: 'boolean' },
        roll: { type: 'boolean' },
        reuse: { type: 'boolean' },
        docker: { type: 'boolean' },
        scopes: { type: 'boolean' },
        'scale-set': { type: 'boolean' },
        endpoint: { type: 'string' },
        json: { type: 'boolean' },
        verbose: { type: 'boolean' },
        deadline: { type: 'string' },
        seed: { type: 'string' },
        apps: { type: 'string' },
        'apt-pool': { type: 'string', multiple: true },
        help: { type: 'boolean', short: 'h' },
      },
      strict: true,
      allowPositionals: false,
    }));
  } catch (e) {
    throw new UsageError((e as Error).message);
  }
  if (values.help) return { help: true, json: false, verbose: false, burst: false, drift: false };
  if (values.endpoint !== undefined && !/^https?:\/\/[^/]+/.test(values.endpoint)) throw new UsageError(`--endpoint must be an http(s) URL, got "${values.endpoint}"`);
  const jobs = count('jobs', values.jobs, 0, ARG_LIMITS.jobs);
  const poolSize = count('pool-size', values['pool-size'], 0, ARG_LIMITS.poolSize);
  const deadline = count('deadline', values.deadline, ARG_LIMITS.deadlineMin, ARG_LIMITS.deadlineMax);
  const seed = count('seed', values.seed, 0, ARG_LIMITS.seed);
  const apps = count('apps', values.apps, 1, ARG_LIMITS.apps);
  const burst = values.burst ?? false;
  const faultSet = values.faults;
  if (faultSet !== undefined && !Object.hasOwn(FAULT_SETS, faultSet)) {
    throw new UsageError(`--faults takes no value or one of ${FAULT_NAMES.join(', ')}, got "${faultSet}"`);
  }
  const scaleSet = values['scale-set'] === true;
  if (seed !== undefined && faultSet !== 'standard' && !scaleSet) throw new UsageError('--seed plans the lost-job faults (add --faults) or the scale set\'s (add --scale-set)');
  if (scaleSet) {
    const clash = [
      ['--reuse', values.reuse === true],
      ['--faults', faultSet !== undefined],
      ['--scopes', values.scopes === true],
      ['--docker', values.docker === true],
      ['--roll', values.roll === true],
      ['--drift', values.drift === true],
      ['--burst', values.burst === true],
      ['--apt-pool', values['apt-pool'] !== undefined],
      ['--apps', values.apps !== undefined],
    ].find(([, on]) => on);
    if (clash) throw new UsageError(`--scale-set runs its own two waves and faults on the two GitHub pools: leave out ${String(clash[0])}`);
  }
  if (faultSet === 'standard' && (jobs ?? SCENARIO_DEFAULTS.jobs) < minimumJobs()) {
    throw new UsageError(`--faults needs --jobs ${minimumJobs()} or more (the lost-job faults need that many jobs per provider), got ${jobs}`);
  }
  const image = values.image;
  if (image !== undefined && !(LOCAL_IMAGES as readonly string[]).includes(image)) throw new UsageError(`--image must be one of ${LOCAL_IMAGES.join(', ')}, got "${image}"`);
  if (faultSet === 'tampered-download' && poolSize === 0) {
    throw new UsageError('--faults tampered-download with --pool-size 0 launches no standby, so no prime can fail and no pool backs off: leave out --pool-size 0');
  }
  if (faultSet === 'tampered-download' && image === 'prebuilt') {
    throw new UsageError('--faults tampered-download needs the stock image (a prebuilt image downloads nothing): leave out --image prebuilt');
  }
  if (values.roll) {
    const clash = [['--reuse', values.reuse === true], ['--faults', faultSet !== undefined], ['--image prebuilt', image === 'prebuilt']].find(([, on]) => on);
    if (clash) throw new UsageError(`--roll rolls the stock image's installed runner over to a newer release: leave out ${String(clash[0])}`);
    if (poolSize === 0) throw new UsageError('--roll needs parked instances to roll over: leave out --pool-size 0');
  }
  if (values.reuse) {
    // The reuse run has its own shape: one job per repository and project in each wave.
    const clash = [['--jobs', jobs !== undefined], ['--burst', burst], ['--faults', faultSet !== undefined], ['--drift', values.drift === true]].find(([, on]) => on);
    if (clash) throw new UsageError(`--reuse sends its own two waves of one job per repository and project: leave out ${String(clash[0])}`);
    if ((poolSize ?? SCENARIO_DEFAULTS.poolSize) === 0) throw new UsageError('--reuse needs parked instances to reuse: leave out --pool-size 0');
    // Without root the machines share this user (no useradd), and a machine's cleaning, which
    // ends every process of the runner user, would see and end the others' runners.
    if (!root) {
      throw new UsageError('--reuse needs root: each played machine needs a runner user of its own (useradd), since the cleaning after a job ends every process of that user; run it as root');
    }
  }
  if (values.docker) {
    const clash = [['--reuse', values.reuse === true], ['--faults', faultSet !== undefined]].find(([, on]) => on);
    if (clash) throw new UsageError(`--docker runs container jobs on the example's pools: leave out ${String(clash[0])}`);
    const missing = dockerMissing(root);
    if (missing) throw new UsageError(`--docker needs ${missing}`);
  }
  if (values.scopes) {
    const clash = [['--reuse', values.reuse === true], ['--faults', faultSet !== undefined]].find(([, on]) => on);
    if (clash) throw new UsageError(`--scopes alternates the jobs between two organisations and two groups: leave out ${String(clash[0])}`);
  }
  const aptPools = values['apt-pool'];
  if (aptPools !== undefined) {
    if (image === 'prebuilt') throw new UsageError('--apt-pool needs the stock image (a prebuilt image installs nothing): leave out --image prebuilt');
    if (!root) throw new UsageError("--apt-pool needs root: the apt pool's machines run this host's real apt-get; run it as root");
    const bad = aptPools.find((name) => !/^[a-z0-9-]{1,40}$/.test(name));
    if (bad !== undefined) throw new UsageError(`--apt-pool takes a pool name of the example (linux-x64, gitlab-docker), got "${bad}"`);
  }
  // Without --burst the jobs go in waves of the parked instances; with none parked no wave is
  // ever sent and the run only ends at its deadline. Refused rather than silently made a burst.
  if (poolSize === 0 && !burst && !scaleSet && (jobs ?? SCENARIO_DEFAULTS.jobs) > 0) {
    throw new UsageError('--pool-size 0 parks no instance, so the default run (jobs in waves the parked instances serve warm) could never send a job: add --burst to launch every job cold');
  }
  return {
    help: false,
    json: values.json ?? false,
    verbose: values.verbose ?? false,
    burst,
    drift: values.drift ?? false,
    ...(values.reuse ? { reuse: true as const } : {}),
    ...(values.docker ? { docker: true as const } : {}),
    ...(values.scopes ? { scopes: true as const } : {}),
    ...(scaleSet ? { scaleSet: true as const, jobs: jobs ?? SCALE_SET_DEFAULTS.jobs, poolSize: poolSize ?? SCALE_SET_DEFAULTS.poolSize } : {}),
    ...(values.roll ? { roll: true as const } : {}),
    ...(jobs === undefined || scaleSet ? {} : { jobs }),
    ...(poolSize === undefined || scaleSet ? {} : { poolSize }),
    ...(deadline === undefined ? {} : { deadlineMs: deadline * 1000 }),
    ...(values.endpoint === undefined ? {} : { endpoint: values.endpoint }),
    ...(faultSet === undefined ? {} : { faults: FAULT_SETS[faultSet as keyof typeof FAULT_SETS] }),
    ...(image === undefined ? {} : { image: image as LocalImage }),
    ...(seed === undefined ? {} : { seed }),
    ...(aptPools === undefined ? {} : { aptPools: [...new Set(aptPools)] }),
    ...(apps === undefined ? {} : { apps }),
  };
}

/** Digits only: Number() would also take "1e3", "0x10", " 5" and "". */
function count(name: string, value: string | undefined, min: number, max: number): number | undefined {
  if (value === undefined) return undefined;
  const n = /^\d+$/.test(value) ? Number(value) : NaN;
  if (!Number.isSafeInteger(n) || n < min || n > max) throw new UsageError(`--${name} must be a whole number from ${min} to ${max}, got "${value}"`);
  return n;
}
