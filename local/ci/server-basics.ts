import type { Delivery } from '../deliveries';
import type { EventSink } from '../events';
import { Faults, type FaultMatch } from './http';

/**
 * What the loopback GitHub and GitLab share besides HTTP (http.ts) and job assignment
 * (assign.ts): the options both take, the request log the reconciler's budget is counted
 * from, the injected faults, the `job-done` event, and the runners that go astray.
 */
export interface LoopbackServerOptions {
  readonly onEvent?: EventSink;
  /** How long a fake runner works on a job (default 1). */
  readonly jobSeconds?: number;
  /** Runners that go astray, as issue 11's retry cases need them (default: none does). */
  readonly strays?: StrayRunners;
}

/**
 * The two ways a runner leaves the job it was made for queued (issue 11, section 2), chosen
 * per runner by its name (GitHub's runner name, GitLab's runner description: both hold the
 * instance id, lambdas/shared/contract/boot.ts `runnerName`).
 */
export interface StrayRunners {
  /**
   * The job the fleet made the runner for, as the harness knows it (the runner name holds its
   * instance id, the instance's tags its job); undefined when it does not know.
   */
  readonly ownJob: (runnerName: string) => number | undefined;
  /**
   * "A runner takes another job's job": the service hands the runner the oldest waiting job
   * of its labels other than its own when one waits (its own only when none does), as GitHub
   * and GitLab may, since a registration is not bound to a job.
   */
  readonly takesAnotherJob?: (runnerName: string) => boolean;
  /**
   * "A runner dies before taking any": the runner registered and came up, and its first job
   * request is its last word: the service answers it with no job and counts the runner gone
   * from then on (GitHub: offline at once, the bound after which it would notice a silent
   * runner collapsed to nothing; GitLab: the request is not a contact, so the runner keeps
   * the status it had). Its registration stays until the fleet deletes it.
   */
  readonly diesBeforeJob?: (runnerName: string) => boolean;
}

/**
 * The fleet's webhook as a service's hook settings hold it: its secret (GitHub's webhook
 * secret, GitLab's secret token) and where deliveries go. Set once the fleet exists.
 */
export interface LoopbackWebhook {
  readonly secret: string;
  /** Posts a delivery to the webhook; resolves to its HTTP status (0: no answer). */
  readonly send: (delivery: Delivery) => Promise<number>;
}

/** A request as a server's log keeps it (after faults). */
export interface LoggedRequest {
  readonly method: string;
  readonly path: string;
}

export interface ServerBasics<R extends LoggedRequest> {
  readonly jobSeconds: number;
  readonly faults: Faults;
  /** Logs a request the server served. */
  log(request: R): void;
  /** The requests served so far, in order, as copies. */
  requests(): R[];
  /** `failNext` of both servers' interfaces. */
  failNext(match: FaultMatch, status: number, times?: number): void;
  /** Reports that a runner finished a job (the local report's `job-done`). */
  jobDone(provider: 'github' | 'gitlab', jobId: number, runnerName: string | undefined): void;
  readonly strays: StrayRunnerModes;
  /** Where the server's own deliveries (a job's start) go from now on. */
  setWebhook(webhook: LoopbackWebhook): void;
  /**
   * Sends the delivery `build` signs with the webhook's secret, after the current answer (as
   * the services send theirs, asynchronously); nothing without a webhook. A failed send is
   * not retried: the ledger stage it carries is best effort, as at GitHub and GitLab.
   */
  sendHook(build: (secret: string) => Delivery): void;
  /** Resolves once every delivery sent so far has been answered. */
  hooksSettled(): Promise<void>;
}

export function serverBasics<R extends LoggedRequest>(opts: LoopbackServerOptions): ServerBasics<R> {
  const faults = new Faults();
  const served: R[] = [];
  let webhook: LoopbackWebhook | undefined;
  const pending = new Set<Promise<unknown>>();
  return {
    setWebhook: (w) => void (webhook = w),
    sendHook(build) {
      const target = webhook;
      if (!target) return;
      const sent = new Promise<void>((resolve) => setImmediate(resolve)).then(() => target.send(build(target.secret))).catch(() => 0);
      pending.add(sent);
      void sent.finally(() => pending.delete(sent));
    },
    hooksSettled: async () => {
      while (pending.size > 0) await Promise.allSettled([...pending]);
    },
    jobSeconds: opts.jobSeconds ?? 1,
    faults,
    log: (request) => void served.push(request),
    requests: () => served.map((r) => ({ ...r })),
    failNext: (match, status, times) => faults.add(match, status, times),
    jobDone: (provider, jobId, runnerName) => opts.onEvent?.({ t: Date.now(), kind: 'job-done', provider, ciJobId: String(jobId), ...(runnerName === undefined ? {} : { runnerName }) }),
    strays: new StrayRunnerModes(opts.strays),
  };
}

/** A job's labels (GitHub) or tags (GitLab) as both servers' `addJob` takes them. */
export function checkedLabels(labels: unknown, what: 'labels' | 'tags'): string[] {
  if (!Array.isArray(labels) || labels.some((l) => typeof l !== 'string' || l === '')) throw new Error(`${what} must be non-empty strings`);
  return [...(labels as string[])];
}

/** The stray modes' state: which runners died, and which job a runner gets. */
export class StrayRunnerModes {
  private readonly dead = new Set<string>();

  constructor(private readonly modes: StrayRunners | undefined) {}

  /** Whether this job request is (or follows) the runner's death: answered with no job. */
  dies(runnerName: string): boolean {
    if (this.dead.has(runnerName)) return true;
    if (!this.modes?.diesBeforeJob?.(runnerName)) return false;
    this.dead.add(runnerName);
    return true;
  }

  /**
   * The job the runner gets: the service's own choice (`choose`: the oldest it may take),
   * unless the runner takes another job's job and another waits.
   */
  jobFor<J extends { readonly id: number }>(runnerName: string, waiting: readonly J[], choose: (jobs: Iterable<J>) => J | undefined): J | undefined {
    const own = this.modes?.takesAnotherJob?.(runnerName) ? this.modes.ownJob(runnerName) : undefined;
    if (own === undefined) return choose(waiting);
    return choose(waiting.filter((j) => j.id !== own)) ?? choose(waiting);
  }
}

/** Records as both servers' `jobs()` and `runners()` list them: by id (the order they were created), made public. */
export function byId<T extends { readonly id: number }, P>(records: Iterable<T>, toPublic: (record: T) => P): P[] {
  return [...records].sort((a, b) => a.id - b.id).map(toPublic);
}

/** What a job runs on the fake runner that takes it (both loopback servers' `addJob`). */
export interface LocalJobOptions {
  /**
   * A bash script the fake runner runs as the job, in the job's workspace, as the runner user
   * (local/runner/run.sh and gitlab-runner say which variables it gets). @default - none: the
   * fake runner only waits the job's seconds
   */
  readonly script?: string;
  /**
   * A container job (docs/local.md, "Docker"): the script runs in a container of this image,
   * beside these service containers, as the real runners run GitHub's `container:` and
   * `services:` and GitLab's `image:` and `services:`. @default - none: the script runs on the machine
   */
  readonly containers?: LocalJobContainers;
}

/** A container job's images: the job's own and its services (reachable by their alias). */
export interface LocalJobContainers {
  readonly image: string;
  readonly services?: readonly LocalJobService[];
}

export interface LocalJobService {
  readonly alias: string;
  readonly image: string;
  /** The service's command (GitLab's `command:`; GitHub's service `options` cannot set one, so the image's entrypoint must do). */
  readonly command?: readonly string[];
}
