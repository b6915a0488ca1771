import { execFileSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { GetParameterCommand, PutParameterCommand } from '@aws-sdk/client-ssm';
import { GetQueueAttributesCommand } from '@aws-sdk/client-sqs';
import { delaySeconds, encodeStreak, type PrimeStreak } from '../lambdas/pool/backoff';
import { DEFAULT_FAULT_SEED, planFaults } from './fault-plan';
import { createJobRecordTable, jobRecordTableName, liveLaunchTickets } from './job-record-table';
import { buildFaultProof } from './fault-report';
import { LossyRun } from './lossy-run';
import { clearFleetConfigCache } from '../lambdas/shared/fleet-config-source';
import { GetItemCommand } from '@aws-sdk/client-dynamodb';
import { DEFAULT_PREFIX, JOB_RECORD_ATTRIBUTES, JOB_RETRY_DEFAULTS, LAUNCH_TEMPLATE_VERSION_TAG, PROVIDERS, scaleSetLeaseKey, ssmPaths, tagKeys, WARM_STANDBY_VALUE, type FleetConfig, type Provider, type RunnerPackage, type RunnerReleaseSources } from '../lambdas/shared/contract';
import { startMoto } from '../test/support/moto';
import { slowdown } from '../test/support/slowdown';
import { refuseStartOfOneInstance, type StartRefusal } from './aws-faults';
import { startLoopbackGitHub, type LoopbackGitHub } from './ci/github-server';
import { startLoopbackGitLab, type LoopbackGitLab } from './ci/gitlab-server';
import { githubWorkflowJobQueued, gitlabJobPending, withBadSignature, type Delivery } from './deliveries';
import type { EventSink, LocalEvent } from './events';
import { LOCAL_APT_IMAGE_ID, localRunnerUser } from './instances/launch-templates';
import { machineAt } from './instances/machine';
import { canCreateUsers, hostUsers, playedUserPrefix, reapStrandedPlayedUsers, runPidFile, RUNNER_USER_PLACEHOLDER } from './instances/runner-users';
import { InstancePlayer } from './instances/player';
import { listenerHandOverMs, LOCAL_ACCOUNT, LOCAL_REGION, LocalLambdas, localClients, localDynamo, type LambdaName, type ListenerSchedule, type LocalAwsClients } from './lambdas';
import { LOCAL_GITLAB_WEBHOOK_ID, LOCAL_SECOND_GITHUB_ORGANIZATION, LOCAL_SECOND_GITLAB_GROUP, localExample, provision, publishNewTemplateVersion, type ProvisionedFleet } from './provision';
import { backoffSkewMs, PrimeBackoffWatch, readPrimeStreak } from './prime-backoff';
import { buildLocalRelease, runnerPackageOf } from './release/packages';
import type { LocalJobOptions } from './ci/server-basics';
import { LOCAL_DOCKER_IMAGE, startLocalDockerDaemon, type LocalDockerDaemon } from './docker-daemon';
import { buildDockerProof, DOCKER_JOBS, DOCKER_REPORTS_DIR, dockerInstallFigure, readDockerReports, type DockerDaemonState, type DockerProof } from './docker-run';
import { buildScopesProof, rotationWave, type ScopesProof, type ScopeTarget, type SentScopedJob } from './scopes-run';
import { buildScaleSetProof, FAULT_MOMENTS, LOCAL_SCALE_SET, planScaleSetFaults, queueRefusalsOutsideFaults, scaleSetFigures, type FaultMoment } from './scale-set-run';
import { inject, injectedFaults, localScaleSetResource, type Injection } from './scale-set-faults';
import { buildReuseProof, localReuseProps, readReuseReports, REUSE_GITHUB_REPOSITORIES, REUSE_GITLAB_PROJECTS, REUSE_WAVES, reuseJobScript, type ReuseWaveJob } from './reuse-run';
import { startReleaseServer } from './release/server';
import { LocalReleases } from './release/published';
import { buildFailSafe, buildReport, checkBootLogs, findLeftovers, listInstances, observeWorld, type LocalReport, type ObservedInstance, type ObservedWorld, type ScenarioJob } from './report';

/**
 * One run of the whole flow on this machine: moto, the loopback CI servers, the fleet
 * provisioned from the example props, the instance player, the Lambdas on their triggers;
 * the pools fill, jobs arrive as signed webhook deliveries, and the run ends when every job
 * is served (or visibly dead-lettered) and nothing is left behind, or at the deadline.
 */

export interface ScenarioFaults {
  /** EC2 refuses StartInstances for one instance (capacity), through scale-up's EC2 client. */
  readonly refuseStart?: boolean;
  /** The first instance of the GitLab pool never finishes priming. */
  readonly stallPriming?: boolean;
  /** A forged GitHub delivery (bad signature) among the good ones. */
  readonly badSignature?: boolean;
  /** One GitHub delivery redelivered (same delivery id), one GitLab job announced twice (two deliveries). */
  readonly duplicate?: boolean;
  /** The loopback GitHub answers 500 once to the JIT config request. */
  readonly ciError?: boolean;
  /**
   * The release server serves every runner package with a byte changed (its SHA-256 no longer
   * the pinned one; stock image only): every install is refused, so no standby primes and no
   * cold launch runs a runner. The run then checks that the fleet fails safe (the report's
   * failSafe) instead of serving the jobs.
   */
  readonly tamperedDownload?: boolean;
  /**
   * Issue 11's lost-job faults, planned by `seed` (local/fault-plan.ts): deliveries dropped
   * before the webhook and answered 5xx, a GitHub runner that takes another job's job, one that
   * dies before taking any, a GitLab job cancelled after its delivery, and GitHub's `busy: false`
   * mid-job. The run then has the per-job record table, the retry and the reconciler.
   */
  readonly lossy?: boolean;
}

/** stock: no runner on the image, the boot installs it from the loopback release server; prebuilt: the runner in place. */
export type LocalImage = 'stock' | 'prebuilt';
export const LOCAL_IMAGES: readonly LocalImage[] = ['stock', 'prebuilt'];
/** The version the local runner packages carry (the boot log's "installed the ... runner" line). */
export const LOCAL_RUNNER_VERSION = 'local-1';
/** The version the roll-over run publishes after the pools filled. */
export const LOCAL_ROLLED_VERSION = 'local-2';
/** The release resolver's schedule in the roll-over run (deployed: hourly). */
const RUNNER_RELEASE_EVERY_MS = 2_000;

export interface ScenarioOptions {
  /** Jobs per CI provider (the default run: 5 GitHub and 5 GitLab jobs). */
  readonly jobs?: number;
  /** Parked instances per pool. */
  readonly poolSize?: number;
  /** All jobs at once (more than the pools hold: the rest launch cold); otherwise in waves the pools can serve warm. */
  readonly burst?: boolean;
  readonly faults?: ScenarioFaults;
  /** The machine image the instances play. @default 'stock' */
  readonly image?: LocalImage;
  /** After the pools filled: a new launch template version; the parked instances of the old one are evicted and replaced. */
  readonly drift?: boolean;
  /** A moto to use instead of starting one (its state is not reset). */
  readonly endpoint?: string;
  /** Bound on the whole run after provisioning (ms); by default 300 s times the machine's slowdown. */
  readonly deadlineMs?: number;
  readonly onEvent?: EventSink;
  readonly onLog?: (fn: LambdaName, line: string) => void;
  /** Seconds a fake runner works on a job. */
  readonly jobSeconds?: number;
  readonly keepSandbox?: boolean;
  /** Ends the run early (Ctrl-C): it stops where it is, still reports, and stops everything it started. */
  readonly signal?: AbortSignal;
  /** The lossy faults' plan seed (default DEFAULT_FAULT_SEED). */
  readonly seed?: number;
  /**
   * Reusable pools (local/reuse-run.ts): two waves of one job per repository and project,
   * the second once the first parked; `jobs` and `burst` are then unused.
   */
  readonly reuse?: boolean;
  /**
   * Container jobs (local/docker-run.ts): the pools keep their Docker, the run starts a Docker
   * daemon of its own for the machines, and every job is a container job. Needs root.
   */
  readonly docker?: boolean;
  /**
   * One fleet serving several scopes (local/scopes-run.ts): the GitHub jobs alternate between the
   * example's organisation and `LOCAL_SECOND_GITHUB_ORGANIZATION` (a pool of its own
   * `organization`, the same labels), the GitLab jobs between the example's group and
   * `LOCAL_SECOND_GITLAB_GROUP` (its own pool, tags and webhook); two GitHub Apps share the load
   * (unless `apps` says otherwise) and, with two or more, the first App's budgets are spent after
   * the first half of the GitHub jobs. The report's `scopes` names the pool and the runner scope
   * of each job.
   */
  readonly scopes?: boolean;
  /**
   * Pools of the example whose machines play an Ubuntu-style image (no dnf): their install
   * step runs this host's real apt-get (a played Debian machine standing in for Ubuntu).
   * Needs root and the stock image; installs the runner's OS packages on this host (those
   * missing), so it is not part of the default run. @default - none
   */
  readonly aptPools?: readonly string[];
  /** GitHub Apps sharing the rate limit (`--apps N`): the loopback installs each on the organisation. @default 1 (2 with `scopes`) */
  readonly apps?: number;
  /**
   * Runner scale sets (local/scale-set-run.ts): a scale-set pool (`LOCAL_SCALE_SET`) beside the
   * example's GitHub pool, the same labels, no GitLab pool; the scale set created by the
   * scale-set resource's handler and deleted by it at the end; the listener on a short schedule;
   * `jobs` GitHub jobs per path (the scale set's name its `runs-on`, or the pool's labels), in two
   * waves (the second once no standby is parked); the listener's faults planned by `seed`.
   * The report's `scaleSet` holds the proof and the two paths' figures.
   */
  readonly scaleSet?: boolean;
  /**
   * Runner updates: the pools follow the newest runner release (no pin), which the release
   * server publishes as GitHub's and GitLab's release data; after the pools filled it publishes
   * a newer one, and the jobs go only once every parked instance rolled over to it. Stock image only.
   */
  readonly roll?: boolean;
}

/** What the roll-over run shows (`roll`): `replaced` parked instances (`Evictions{Reason=stale-runner}`), served jobs whose instance carried another version than `to`. */
export type RollProof = NonNullable<LocalReport['roll']>;

export interface ScenarioResult {
  readonly report: LocalReport;
  readonly events: readonly LocalEvent[];
  /** Status codes of the webhook deliveries, in order, with what each was. */
  readonly deliveries: readonly { what: string; status: number }[];
  /** Pool log lines with the eviction reasons (drift, never-priming). */
  readonly evictions: Readonly<Record<string, number>>;
  readonly templateVersions: Readonly<Record<string, { before: string; after: string }>>;
  readonly refusedStarts: number;
  readonly fleet: ProvisionedFleet;
  /** moto and the CI servers as listed at the end (what the report counted). */
  readonly world: ObservedWorld;
  /** Every Lambda log line, as `<fn> <json>`. */
  readonly logs: readonly string[];
  /** Distinct messages the jobs queue delivered to scale-up, per qualified job id. */
  readonly queueMessagesPerJob: Readonly<Record<string, number>>;
  readonly roll?: RollProof;
}

// The deadline only catches a run that cannot settle: a run ends when it settles. A default
// run took 32 s on one 2-core machine and 100 s on another like it (every played machine's aws
// CLI calls share the host's CPU), hence the margin.
export const SCENARIO_DEFAULTS = { jobs: 5, poolSize: 3, deadlineMs: 300_000, jobSeconds: 1, image: 'stock' as LocalImage } as const;
// The bounds below are tuned on an unloaded machine; the run scales them (and the boot
// script's, and its default deadline) by the slowdown it measures (test/support/slowdown.ts),
// so that a loaded host gives slower answers, never different ones. The schedules stay.
/** Schedules of the local Lambdas: a pool run every second, a sweep every 2 s (deployed: every minute). */
const POOL_EVERY_MS = 1_000;
const SCALE_DOWN_EVERY_MS = 2_000;
/**
 * The sweep's grace period, locally (deployed: 10 minutes). Long enough that an instance
 * ends itself after its job before the sweep would terminate it as "job-finished": a sweep
 * that wins that race kills the boot script's background config delete, and the parameter
 * then waits for the sweep's one-minute instance-gone rule. 10 s was too short while a
 * pool's machines boot at once on a 2-core host (a delete-parameter took 11 s there).
 */
const SWEEP_GRACE_SECONDS = 30;
/** A standby priming longer than this is stuck: the scenario fast-forwards the pool's clock for it. */
const STUCK_PRIMING_MS = 10_000;
/** The loopback GitHub's runner bounds: waiting for a job, and silence before a runner counts as lost. */
const RUNNER_WAIT_SECONDS = 30;
/**
 * The lossy faults' compressed schedules (deployed: retry after 5 minutes; reconcile every 5
 * minutes, jobs queued at least 2 minutes). A retry check before a runner could have taken
 * its job only looks again later (a runner of the pool is starting), so short is safe.
 */
const RETRY_AFTER_SECONDS = 8;
const RECONCILE_EVERY_MS = 3_000;
const RECONCILE_MIN_QUEUED_SECONDS = 4;
/**
 * With the lost-job faults a GitHub runner waits this long for a job (otherwise
 * RUNNER_WAIT_SECONDS): the dead runner's machine and the cancelled job's runner end after it,
 * and every job is queued before any runner starts, so a runner with work finds it at once.
 */
const LOSSY_RUNNER_WAIT_SECONDS = 10;

/**
 * The scale-set run's compressed listener (deployed: every minute, a 300 s timeout, a 115 s
 * margin after a 5 s reserve; GitHub's long poll 50 s): several hand-overs per run. The session idles out at
 * GitHub after twice the invocation, so a killed poller's session may outlive its lease.
 */
const LISTENER_EVERY_MS = 3_000;
const LISTENER_INVOCATION_MS = 9_000;
const LISTENER_MARGIN_MS = 3_000;
const SCALE_SET_LONG_POLL_SECONDS = 2;
/** The foreign-lease fault: another container's poller holds the lease this long. */
const FOREIGN_LEASE_MS = 5_000;
/** --scale-set: the scale-set job sent after the last fault (recovery shown, not assumed). */
export const SCALE_SET_RECOVERY_JOBS = 1;

const GITHUB_REPOSITORY = 'app';
const GITLAB_PROJECT = { id: 4711, path: 'example-group/app' };

export async function runScenario(options: ScenarioOptions = {}): Promise<ScenarioResult> {
  const factor = slowdown();
  const o = { ...SCENARIO_DEFAULTS, deadlineMs: Math.ceil(SCENARIO_DEFAULTS.deadlineMs * factor), ...options };
  const stuckPrimingMs = Math.ceil(STUCK_PRIMING_MS * factor);
  const listenerSchedule: ListenerSchedule = { everyMs: LISTENER_EVERY_MS, invocationMs: Math.ceil(LISTENER_INVOCATION_MS * factor), marginMs: Math.ceil(LISTENER_MARGIN_MS * factor) };
  const startedAt = Date.now();
  const faults = o.faults ?? {};
  const events: LocalEvent[] = [];
  const onEvent: EventSink = (e) => {
    events.push(e);
    o.onEvent?.(e);
  };
  const cleanups: (() => Promise<void> | void)[] = [];
  const cleanup = async () => {
    for (const c of cleanups.reverse()) {
      try {
        await c();
      } catch {
        // best effort: everything else still stops
      }
    }
  };
  try {
    // 1. moto and the loopback CI servers.
    let endpoint = o.endpoint;
    if (!endpoint) {
      const moto = await startMoto();
      cleanups.push(() => moto.stop());
      endpoint = moto.endpoint;
    }
    const clients = localClients(endpoint);
    const sandboxRoot = mkdtempSync(join(tmpdir(), 'cwr-local-'));
    // A later run reaps this run's runner users only once this process is gone (runner-users.ts).
    writeFileSync(runPidFile(sandboxRoot), `${process.pid}\n`);
    let removeSandbox: (() => void) | undefined;
    if (!o.keepSandbox) {
      removeSandbox = (): void => rmSync(sandboxRoot, { recursive: true, force: true, maxRetries: 3 });
      // Also on an abrupt exit (a second Ctrl-C exits at once, without the cleanups).
      process.on('exit', removeSandbox);
      cleanups.push(() => {
        process.off('exit', removeSandbox!);
        removeSandbox!();
      });
    }

    const example = localExample();
    const runnerSeconds = Math.ceil(RUNNER_WAIT_SECONDS * factor);
    const plan = faults.lossy ? planFaults(o.seed ?? DEFAULT_FAULT_SEED, o.jobs) : undefined;
    const lossy = new LossyRun(plan, DEFAULT_PREFIX, events);
    const apps = o.apps ?? (o.scopes ? 2 : 1);
    const partner = LOCAL_SECOND_GITHUB_ORGANIZATION;
    const github = await startLoopbackGitHub({
      organization: example.github.organization!,
      ...(o.scopes ? { organizations: [partner.organization] } : {}),
      appId: example.github.appId,
      // Further Apps: ids after the example's, each with its own key, installation and rate limits.
      ...(apps > 1 ? { additionalAppIds: Array.from({ length: apps - 1 }, (_, i) => String(Number(example.github.appId) + i + 1)) } : {}),
      onEvent,
      jobSeconds: o.jobSeconds,
      runnerWaitSeconds: plan ? Math.ceil(LOSSY_RUNNER_WAIT_SECONDS * factor) : runnerSeconds,
      runnerLostSeconds: runnerSeconds,
      ...(o.scaleSet ? { scaleSet: { longPollSeconds: SCALE_SET_LONG_POLL_SECONDS, sessionIdleSeconds: Math.ceil((2 * LISTENER_INVOCATION_MS * factor) / 1000) } } : {}),
      ...(plan ? { busyFalseMidJob: true, strays: lossy.strays(), redeliver: (r) => lossy.redeliver(r) } : {}),
    });
    cleanups.push(() => github.close());
    const hook = { owner: 'group', ownerId: example.gitlab.scopeId!, hookId: LOCAL_GITLAB_WEBHOOK_ID } as const;
    const second = LOCAL_SECOND_GITLAB_GROUP;
    const groups = o.scopes
      ? { groups: [{ id: second.id, projectIds: [second.project.id] }], moreHooks: [{ owner: 'group', ownerId: second.id, hookId: LOCAL_GITLAB_WEBHOOK_ID } as const] }
      : {};
    const gitlab = await startLoopbackGitLab({ groupId: example.gitlab.scopeId!, hook, ...groups, onEvent, jobSeconds: o.jobSeconds, ...(plan ? { offlineMidJob: true, resend: (r) => lossy.resend(r) } : {}) });
    cleanups.push(() => gitlab.close());

    // 2. What the CDK app would create. On a stock image the pools' runnerPackage is the
    // loopback release server's (this machine cannot reach GitHub's or GitLab's downloads).
    const image = o.image;
    if (faults.tamperedDownload && image !== 'stock') throw new Error('the tampered-download fault needs the stock image: a prebuilt image downloads nothing');
    const aptPools = o.aptPools ?? [];
    if (aptPools.length > 0 && image !== 'stock') throw new Error('an apt pool needs the stock image: a prebuilt image installs nothing');
    if (aptPools.length > 0 && process.getuid?.() !== 0) throw new Error('an apt pool needs root: its machines run this host\'s real apt-get');
    if (o.roll && image !== 'stock') throw new Error('the roll-over run needs the stock image: a prebuilt image installs no release');
    let runnerPackages: Partial<Record<Provider, RunnerPackage>> | undefined;
    let downloads = 0;
    let releases: LocalReleases | undefined;
    let releaseSources: RunnerReleaseSources | undefined;
    if (image === 'stock') {
      // In the sandbox, so it goes with it, even on an abrupt exit (no machine is named so).
      const releaseDir = join(sandboxRoot, 'release');
      buildLocalRelease(releaseDir);
      if (o.roll) {
        releases = new LocalReleases(releaseDir);
        releases.publish(LOCAL_RUNNER_VERSION, new Date(Date.now() - 86_400_000));
      }
      const release = await startReleaseServer({ dir: releaseDir, mode: () => (faults.tamperedDownload ? 'tamper' : ''), onRequest: () => downloads++, ...(releases ? { releases } : {}) });
      cleanups.push(() => release.close());
      // Rolling, the pools pin nothing: they follow the release the resolver reads from the server
      // (the GitLab pool opts in, as a deployment must: its default is the pin).
      if (o.roll) releaseSources = LocalReleases.sources(release.url);
      else runnerPackages = Object.fromEntries(PROVIDERS.map((p) => [p, runnerPackageOf(p, LOCAL_RUNNER_VERSION, release.url, releaseDir)]));
    }
    const prefix = DEFAULT_PREFIX;
    // Each played machine's runner user its own (needs root): one machine's cleaning cannot reach another's runner.
    const ownUsers = canCreateUsers() ? playedUserPrefix() : undefined;
    // A run killed outright (SIGKILL) removed none of its users: the first run after it does.
    const stranded = ownUsers ? reapStrandedPlayedUsers(ownUsers) : undefined;
    const machine = { prefix, awsEndpoint: endpoint, sandboxRoot, slowdown: factor, ...(ownUsers ? { runnerUser: RUNNER_USER_PLACEHOLDER } : {}) };
    // --docker: the run's own daemon (never this host's), and where the fake runners report each container job.
    let daemon: LocalDockerDaemon | undefined;
    const dockerReports = join(sandboxRoot, DOCKER_REPORTS_DIR);
    if (o.docker) {
      daemon = await startLocalDockerDaemon(join(sandboxRoot, 'docker'), Math.ceil(60_000 * factor));
      const started = daemon;
      cleanups.push(() => started.stop());
      mkdirSync(dockerReports);
      chmodSync(dockerReports, 0o1777);
    }
    let fleet = await provision(clients, {
      prefix,
      example,
      machine,
      local: { poolSize: o.poolSize, githubApiUrl: github.url, gitlabUrl: gitlab.url, ...(github.apps.length > 1 ? { githubAdditionalAppIds: github.apps.slice(1).map((a) => a.appId) } : {}), ...(runnerPackages ? { runnerPackages } : {}), ...(o.roll ? { followLatestRunner: true } : {}), ...(o.reuse ? { reuse: localReuseProps() } : {}), ...(o.docker ? { docker: true } : {}), ...(aptPools.length ? { aptPools } : {}), ...(o.scopes ? { secondGitHubOrganization: true, secondGitLabGroup: true } : {}), ...(o.scaleSet ? { scaleSetPool: true } : {}) },
      credentials: { githubAppPrivateKeyPem: github.privateKeyPem, githubAdditionalApps: github.apps.slice(1), gitlabAccessToken: gitlab.accessToken },
    });
    clearFleetConfigCache();
    // Always, as deployed: the pool's and scale-up's launch tickets live there (the records too with the lossy faults).
    await createJobRecordTable(endpoint, jobRecordTableName(prefix));
    // --scale-set: the scale set exists at GitHub as a deploy makes it (the resource's Create).
    const scaleSetResource = o.scaleSet ? localScaleSetResource(endpoint, fleet.config.parameters.fleetConfig, jobRecordTableName(prefix), (line) => o.onLog?.('scale-set-listener', line)) : undefined;
    const scaleSetId = scaleSetResource ? Number((await scaleSetResource.create(fleet.config)).Data?.[LOCAL_SCALE_SET.pool]) : undefined;
    /** The loopback's requests the deploy (the Create) made, and where the teardown's (the Delete) begin: neither path's. */
    const requestsAtCreate = github.requests().length;
    let requestsAtDelete = Infinity;

    // 3. The Lambdas on their triggers, and the instance player.
    const evictions: Record<string, number> = {};
    const logs: string[] = [];
    const backoff = new PrimeBackoffWatch(fleet.config.metrics.names.primeBackoff);
    const lambdas = new LocalLambdas({
      endpoint,
      fleetConfigParameter: fleet.config.parameters.fleetConfig,
      queueUrl: fleet.queueUrl,
      deadLetterQueueUrl: fleet.deadLetterQueueUrl,
      instanceArnPrefix: `arn:aws:ec2:${LOCAL_REGION}:${LOCAL_ACCOUNT}:instance/`,
      onEvent,
      onLogLine: (fn, line) => {
        o.onLog?.(fn, line);
        if (fn === 'pool') backoff.onLine(line);
        if (!line.startsWith('{"_aws"')) logs.push(`${fn} ${line}`);
        if (fn === 'pool' && line.includes('"message":"evicted"')) {
          const reason = /"reason":"([^"]+)"/.exec(line)?.[1] ?? 'unknown';
          evictions[reason] = (evictions[reason] ?? 0) + 1;
        }
      },
      sweepGraceSeconds: Math.ceil(SWEEP_GRACE_SECONDS * factor),
      poolEveryMs: POOL_EVERY_MS,
      scaleDownEveryMs: SCALE_DOWN_EVERY_MS,
      jobRecordTable: jobRecordTableName(prefix),
      ...(releaseSources ? { runnerRelease: { everyMs: RUNNER_RELEASE_EVERY_MS, sources: releaseSources } } : {}),
      ...(o.scaleSet ? { scaleSetListener: listenerSchedule } : {}),
      ...(plan
        ? {
            jobRetry: { ...JOB_RETRY_DEFAULTS, retryAfterSeconds: Math.ceil(RETRY_AFTER_SECONDS * factor) },
            reconcile: {
              everyMs: RECONCILE_EVERY_MS,
              options: {
                github: { minQueuedSeconds: Math.ceil(RECONCILE_MIN_QUEUED_SECONDS * factor), intervalSeconds: RECONCILE_EVERY_MS / 1000 },
                gitlab: { minQueuedSeconds: Math.ceil(RECONCILE_MIN_QUEUED_SECONDS * factor), intervalSeconds: RECONCILE_EVERY_MS / 1000 },
              },
            },
          }
        : {}),
    });
    let refusal: StartRefusal | undefined;
    if (faults.refuseStart) refusal = refuseStartOfOneInstance(lambdas.scaleUpClients.ec2);
    if (faults.ciError) github.failNext({ method: 'POST', path: /generate-jitconfig/ }, 500, 1);

    const player = new InstancePlayer({
      ec2: localClients(endpoint).ec2,
      prefix,
      machine,
      awsCli: awsCliPath(),
      onEvent,
      ...(image === 'stock' ? { stockRunnerUser: ownUsers ? RUNNER_USER_PLACEHOLDER : localRunnerUser() } : {}),
      ...(ownUsers ? { ownRunnerUsers: ownUsers } : o.reuse ? { runnerHomeOwner: localRunnerUser() } : {}),
      ...(daemon ? { dockerHost: daemon.host } : {}),
      ...(aptPools.length ? { aptImages: [LOCAL_APT_IMAGE_ID] } : {}),
    });
    // The reuse run's jobs report here, outside every machine: the runner user writes, no cleaning reaches it.
    const reuseReports = join(sandboxRoot, 'reuse-reports');
    if (o.reuse) {
      mkdirSync(reuseReports);
      chmodSync(reuseReports, 0o1777);
    }
    const reuseJobs: ReuseWaveJob[] = [];
    if (faults.stallPriming) player.stallNextPriming(fleet.templates.find((t) => t.provider === 'gitlab')!.pool);
    // Rolling: the first release is resolved before any machine boots, as on a fleet deployed
    // an hour ago (a boot before it would install the rendered pin, unreachable here).
    if (releases) await lambdas.tickRunnerRelease();
    player.start();
    cleanups.push(() => player.stop());
    if (removeSandbox) {
      // Exit hooks run in order: the sandbox goes after the player's hook killed its machines.
      process.off('exit', removeSandbox);
      process.on('exit', removeSandbox);
    }
    lambdas.start();
    cleanups.push(() => lambdas.stop());
    const startDeliveries = connectJobStartHooks(github, gitlab, fleet.webhook, lambdas);
    const deadline = Date.now() + o.deadlineMs;

    const templateVersions: Record<string, { before: string; after: string }> = {};
    const jobs: ScenarioJob[] = [];
    /** --scopes: the App whose budgets the run spent, at which request of the loopback and after how many GitHub jobs. */
    let exhausted: { readonly appId: string; readonly atRequest: number; readonly jobsBefore: number } | undefined;
    /** --scopes: each job sent, with its scope and pool. */
    const scoped: SentScopedJob[] = [];
    const deliveries: { what: string; status: number }[] = [];
    let gaveUp: string | undefined;
    /** The furthest the harness moved the pool's clock ahead (the back-off's time span). */
    let maxSkewMs = 0;
    // --scale-set runs no GitLab pool.
    const gitlabPool = fleet.templates.find((t) => t.provider === 'gitlab')?.pool ?? '';
    /** --scale-set: the faults as injected (awaited before the run settles). */
    const injections: Promise<Injection>[] = [];
    let injectionsEnded = false;
    try {
      // 4. The pools fill: instances prime and park (a stuck one holds its place).
      const stalled = faults.stallPriming ? 1 : 0;
      if (faults.tamperedDownload) {
        // 4'. No standby can prime: the pools see their primes fail until they back off. The
        // pool's clock is moved past each priming timeout and back-off delay instead of
        // waiting them out, one moved pool run at a time.
        let movedAtRun = -Infinity;
        await waitFor('the pools to back off', deadline, o.signal, async () => {
          const backingOff = new Set(fleet.config.pools.filter((p) => backoff.last[p.name] === 1).map((p) => p.name));
          if (backingOff.size === fleet.config.pools.length) return true;
          // The moved run (the next one) has not finished yet.
          if (lambdas.counters.poolRuns < movedAtRun + 2) return false;
          const failed = new Set(events.filter((e) => e.kind === 'boot-failed' && e.instanceId).map((e) => e.instanceId!));
          const streaks: Record<string, PrimeStreak | undefined> = {};
          for (const p of fleet.config.pools) streaks[p.name] = await readPrimeStreak(clients, fleet.config, p.name);
          const skew = backoffSkewMs({ config: fleet.config, instances: await listInstances(clients), failed, streaks, backingOff, now: Date.now() });
          if (skew > 0) {
            lambdas.skewNextPoolRun(skew);
            movedAtRun = lambdas.counters.poolRuns;
            maxSkewMs = Math.max(maxSkewMs, skew);
          }
          return false;
        });
      } else {
        await waitFor('the pools to fill', deadline, o.signal, async () => {
          const world = await listInstances(clients);
          return fleet.config.pools.every((p) => parkedOf(world, fleet.config, p.name).length >= o.poolSize - (p.name === gitlabPool ? stalled : 0));
        });
      }

      if (releases) {
        // A newer release is published: the resolver stores it, the pool replaces the parked
        // instances of the older one a few at a time, and only then do the jobs go.
        releases.publish(LOCAL_ROLLED_VERSION);
        await waitFor('the resolver to store the newer release', deadline, o.signal, async () => (await storedReleases(clients, prefix, fleet.config.pools.map((p) => p.provider))).every((v) => v === LOCAL_ROLLED_VERSION));
        await waitFor('the parked instances to roll over to the newer runner', deadline, o.signal, async () => {
          const world = await listInstances(clients);
          return fleet.config.pools.every((p) => {
            const parked = parkedOf(world, fleet.config, p.name);
            return parked.length >= o.poolSize && parked.every((i) => i.tags[tagKeys(prefix).runnerVersion] === LOCAL_ROLLED_VERSION);
          });
        });
      }

      if (o.drift) {
        // A deploy that changes the user data: a new template version per pool; the Lambdas' next
        // containers read the new config (the cache is cleared as a deploy replaces them).
        for (const t of fleet.templates) {
          fleet = await publishNewTemplateVersion(clients, fleet, t.pool);
          templateVersions[t.pool] = { before: t.version, after: fleet.templates.find((x) => x.pool === t.pool)!.version };
        }
        clearFleetConfigCache();
        await waitFor('the pools to refill from the new template versions', deadline, o.signal, async () => {
          const world = await listInstances(clients);
          return fleet.config.pools.every((p) => {
            const parked = parkedOf(world, fleet.config, p.name);
            return parked.length >= o.poolSize && parked.every((i) => i.tags[LAUNCH_TEMPLATE_VERSION_TAG] === p.launchTemplateVersion);
          });
        });
      }

      // 5. Jobs: created at the CI servers, announced by signed deliveries.
      const deliver = async (what: string, d: Delivery) => {
        const res = await lambdas.webhook(d);
        const status = res.statusCode ?? 0;
        deliveries.push({ what, status });
        return status;
      };
      lossy.connect({ deliver: (what, d) => deliver(what, d), secrets: fleet.webhook, github, gitlab });
      // With --scopes the jobs alternate between the organisations' (and the groups') repositories and pools.
      const organization = fleet.config.github!.organization!;
      const githubTargets: (ScopeTarget & { readonly repository: string })[] = [
        { pool: fleet.config.pools.find((p) => p.provider === 'github')!.name, scope: organization, runnerScope: `org:${organization.toLowerCase()}`, repository: `${organization}/${GITHUB_REPOSITORY}` },
        ...(o.scopes ? [{ pool: partner.pool, scope: partner.organization, runnerScope: `org:${partner.organization}`, repository: partner.repository }] : []),
      ];
      let githubSent = 0;
      const sendGitHub = async (labels: string[], repository?: string, options?: LocalJobOptions) => {
        const target = repository === undefined ? githubTargets[githubSent++ % githubTargets.length]! : { ...githubTargets[0]!, repository: `${organization}/${repository}` };
        const job = github.addJob(target.repository, labels, undefined, options);
        const pool = fleet.config.pools.find((p) => p.name === target.pool)!;
        if (o.scopes) scoped.push({ provider: 'github', ciJobId: String(job.id), target });
        const d = githubWorkflowJobQueued({ jobId: job.id, runId: job.runId, repository: job.repository, labels }, fleet.webhook.githubSecret);
        const deliveredAt = Date.now();
        const fate = lossy.fateOfNext('github', job.id);
        jobs.push({ provider: 'github', ciJobId: String(job.id), pool: pool.name, deliveredAt, ...(fate === 'delivered' ? {} : { fate }) });
        const status = fate === 'delivered' ? await deliver(`github job ${job.id}`, d) : lossy.lose('github', job.id, fate);
        onEvent({ t: deliveredAt, kind: 'webhook-received', provider: 'github', ciJobId: String(job.id), detail: fate === 'delivered' ? status : fate });
        return d;
      };
      const gitlabTargets: (ScopeTarget & { readonly project: { readonly id: number; readonly path: string } })[] = [
        { pool: gitlabPool, scope: GITLAB_PROJECT.path, runnerScope: `group_type:${example.gitlab.scopeId!}`, project: GITLAB_PROJECT },
        ...(o.scopes ? [{ pool: second.pool, scope: second.project.path, runnerScope: `group_type:${second.id}`, project: second.project }] : []),
      ];
      let gitlabSent = 0;
      const sendGitLab = async (given?: { readonly id: number; readonly path: string }, options?: LocalJobOptions) => {
        const target = given ? { ...gitlabTargets[0]!, scope: given.path, project: given } : gitlabTargets[gitlabSent++ % gitlabTargets.length]!;
        const project = target.project;
        const pool = fleet.config.pools.find((p) => p.name === target.pool)!;
        const job = gitlab.addJob(project.id, [...pool.labels], options);
        if (o.scopes) scoped.push({ provider: 'gitlab', ciJobId: String(job.id), target });
        const d = gitlabJobPending({ buildId: job.id, projectId: project.id, projectPath: project.path }, fleet.webhook.gitlabToken);
        const deliveredAt = Date.now();
        const fate = lossy.fateOfNext('gitlab', job.id);
        jobs.push({ provider: 'gitlab', ciJobId: String(job.id), pool: pool.name, deliveredAt, ...(fate === 'delivered' ? {} : { fate }) });
        const status = fate === 'delivered' ? await deliver(`gitlab job ${job.id}`, d) : lossy.lose('gitlab', job.id, fate);
        onEvent({ t: deliveredAt, kind: 'webhook-received', provider: 'gitlab', ciJobId: String(job.id), detail: fate === 'delivered' ? status : fate });
        if (lossy.cancelsAfterDelivery(job.id)) {
          const at = jobs.findIndex((j) => j.provider === 'gitlab' && j.ciJobId === String(job.id));
          jobs[at] = { ...jobs[at]!, cancelled: true };
        }
        return d;
      };
      const githubPool = fleet.config.pools.find((p) => p.provider === 'github')!;
      const githubLabels = ['self-hosted', ...githubPool.labels];

      if (o.reuse) {
        // Two waves of one job per repository and project; the second once the first parked.
        const script = reuseJobScript(reuseReports);
        for (let wave = 1; wave <= REUSE_WAVES; wave++) {
          const before = jobs.length;
          const scopes: string[] = [];
          const sends: Promise<unknown>[] = [];
          // Each send records its job before its first await: jobs[before + i] is the i-th send's.
          for (const repository of REUSE_GITHUB_REPOSITORIES) {
            sends.push(sendGitHub(githubLabels, repository, { script }));
            scopes.push(`${fleet.config.github!.organization}/${repository}`);
          }
          for (const project of REUSE_GITLAB_PROJECTS) {
            sends.push(sendGitLab(project, { script }));
            scopes.push(String(project.id));
          }
          const sent = jobs.slice(before);
          sent.forEach((j, i) => reuseJobs.push({ provider: j.provider, ciJobId: j.ciJobId, scope: scopes[i]!, wave }));
          await Promise.all(sends);
          if (wave < REUSE_WAVES) {
            await waitFor(`wave ${wave} to finish and its instances to park`, deadline, o.signal, async () =>
              waveParked(sent, readReuseReports(reuseReports), await listInstances(clients), tagKeys(fleet.config.prefix), (j) => doneAtCi(j, github, gitlab)),
            );
          }
        }
      }
      if (o.scaleSet) {
        // Two waves per path: the first as many as a pool parks (warm), the second once none is
        // parked (cold: the refills are still priming); the seed's faults around them.
        const planned = planScaleSetFaults(o.seed ?? 1);
        const target = {
          github,
          lambdas,
          pool: LOCAL_SCALE_SET.pool,
          scaleSetId: scaleSetId!,
          startedAt,
          foreignLeaseMs: Math.ceil(FOREIGN_LEASE_MS * factor),
          handOverMs: listenerHandOverMs(listenerSchedule),
          until: () => injectionsEnded || Date.now() > deadline || o.signal?.aborted === true,
          acks: { spent: Promise.resolve() },
        };
        const at = (moment: FaultMoment) => {
          for (const f of planned.filter((x) => x.moment === moment)) injections.push(inject(target, f, Math.ceil(f.delayMs * factor)));
        };
        const webhookPool = fleet.config.pools.find((p) => p.provider === 'github' && !p.scaleSet)!.name;
        const sendScaleSet = () => {
          const job = github.addJob(`${organization}/${GITHUB_REPOSITORY}`, ['self-hosted', LOCAL_SCALE_SET.name]);
          jobs.push({ provider: 'github', ciJobId: String(job.id), pool: LOCAL_SCALE_SET.pool, deliveredAt: Date.now() });
        };
        const wave1 = Math.min(o.poolSize, o.jobs);
        for (const [wave, count] of [[1, wave1], [2, o.jobs - wave1]] as const) {
          at(FAULT_MOMENTS[(wave - 1) * 2]!);
          const sends: Promise<unknown>[] = [];
          for (let i = 0; i < count; i++) {
            sendScaleSet();
            sends.push(sendGitHub(githubLabels));
          }
          await Promise.all(sends);
          at(FAULT_MOMENTS[(wave - 1) * 2 + 1]!);
          if (wave === 1 && count > 0) {
            await waitFor('the first wave to take every parked instance', deadline, o.signal, async () => {
              const world = await listInstances(clients);
              return [webhookPool, LOCAL_SCALE_SET.pool].every((p) => parkedOf(world, fleet.config, p).length === 0);
            });
          }
        }
        // Recovery: one more scale-set job once every fault was injected, required served like the rest.
        await Promise.all(injections);
        sendScaleSet();
      }
      let remaining = o.reuse || o.scaleSet ? { github: 0, gitlab: 0 } : { github: o.jobs, gitlab: o.jobs };
      // With no standby parked (the tampered download), waves would never go: every job at once.
      // Lossy: at once too, so that jobs wait side by side (a stray runner finds another's job).
      const burst = o.burst || faults.tamperedDownload === true || plan !== undefined;
      // --scopes with several Apps: the first App's budgets are spent once the first half of the
      // GitHub jobs hold their runners; the rest must be served through the others.
      const spendFirstAppAfter = o.scopes && apps > 1 && o.jobs > 1 ? Math.ceil(o.jobs / 2) : undefined;
      while (remaining.github > 0 || remaining.gitlab > 0) {
        if (spendFirstAppAfter !== undefined && exhausted === undefined && githubSent >= spendFirstAppAfter) {
          const before = jobs.filter((j) => j.provider === 'github');
          await waitFor(`the first ${before.length} GitHub job(s) to start`, deadline, o.signal, async () => before.every((j) => startedOrDone(events, j, github, gitlab)));
          exhausted = { appId: github.appId, atRequest: github.requests().length, jobsBefore: before.length };
          github.setRateLimitRemaining('installation', 0, github.appId);
          github.setRateLimitRemaining('app', 0, github.appId);
        }
        const githubCap = spendFirstAppAfter !== undefined && exhausted === undefined ? spendFirstAppAfter - githubSent : Infinity;
        let wave = { github: Math.min(remaining.github, githubCap), gitlab: remaining.gitlab };
        if (!burst) {
          // Steady: no more jobs at once than a pool has parked instances, so each lands warm;
          // round the targets, as far as the next target's pool has one parked.
          const world = await listInstances(clients);
          const free = (pool: string) => parkedOf(world, fleet.config, pool).length;
          wave = { github: rotationWave(githubTargets, githubSent, free, wave.github), gitlab: rotationWave(gitlabTargets, gitlabSent, free, wave.gitlab) };
          if (wave.github + wave.gitlab === 0) {
            if (Date.now() > deadline || o.signal?.aborted) break;
            await sleep(250);
            continue;
          }
        }
        const before = jobs.length;
        const sends: Promise<unknown>[] = [];
        for (let i = 0; i < wave.github; i++) sends.push(sendGitHub(githubLabels, undefined, o.docker ? DOCKER_JOBS.github : undefined));
        for (let i = 0; i < wave.gitlab; i++) sends.push(sendGitLab(undefined, o.docker ? DOCKER_JOBS.gitlab : undefined));
        await Promise.all(sends);
        remaining = { github: remaining.github - wave.github, gitlab: remaining.gitlab - wave.gitlab };
        if (!burst && (remaining.github > 0 || remaining.gitlab > 0)) {
          // Wait until this wave's jobs hold their instances before counting parked ones again.
          const waveJobs = jobs.slice(before);
          await waitFor('the wave to be activated', deadline, o.signal, async () => waveJobs.every((j) => startedOrDone(events, j, github, gitlab)));
        }
      }

      if (faults.duplicate) {
        // A redelivery (GitHub's "Redeliver" keeps the delivery id): SQS drops it as a duplicate.
        const d = await sendGitHub(githubLabels);
        await deliver('github redelivery (same delivery id)', d);
        // One GitLab job announced by two hooks (a group hook and a project hook: two delivery
        // ids): two messages for one job; scale-up finds the job's instance and serves it once.
        const first = await sendGitLab();
        const payload = JSON.parse(first.body) as { build_id: number };
        await deliver('gitlab second hook for the same job', gitlabJobPending({ buildId: payload.build_id, projectId: GITLAB_PROJECT.id, projectPath: GITLAB_PROJECT.path }, fleet.webhook.gitlabToken));
      }
      if (faults.badSignature) {
        // Forged: a job the CI server never had, signed with the wrong secret.
        const forged = withBadSignature(githubWorkflowJobQueued({ jobId: 999_999_999, runId: 1, repository: `${fleet.config.github!.organization}/${GITHUB_REPOSITORY}`, labels: githubLabels }, fleet.webhook.githubSecret));
        await deliver('github forged delivery (bad signature)', forged);
        const forgedGitLab = withBadSignature(gitlabJobPending({ buildId: 999_999_999, projectId: GITLAB_PROJECT.id, projectPath: GITLAB_PROJECT.path }, fleet.webhook.gitlabToken));
        await deliver('gitlab forged delivery (wrong token)', forgedGitLab);
      }
    } catch (error) {
      // A step that timed out ends the run early; the report still lists what happened.
      if (!(error instanceof WaitTimeout)) throw error;
      gaveUp = error.message;
    }

    // 6. Until every job is served or dead-lettered and nothing is left behind.
    const keys = tagKeys(fleet.config.prefix);
    let settled = false;
    let backoffSkips = 0;
    while (gaveUp === undefined && Date.now() < deadline && !o.signal?.aborted) {
      // A fleet that cannot install its runner serves nothing: then every job must have had its
      // launch, be dead-lettered, or be held by its pool's prime back-off (a wait copy in the
      // queue, no launch), and every launched instance be gone (a leftover otherwise).
      const jobsDone = faults.tamperedDownload
        ? jobs.every((j) => startedOrDone(events, j, github, gitlab) || heldByBackoff(events, j))
        : jobs.every((j) => doneAtCi(j, github, gitlab) || events.some((e) => e.kind === 'dead-lettered' && e.provider === j.provider && e.ciJobId === j.ciJobId));
      const world = await listInstances(clients);
      if (jobsDone && faults.stallPriming) {
        // The never-priming instance: the pool evicts a standby that has primed for longer than
        // the pool's primingTimeout (at least a minute). Instead of waiting, one pool run sees
        // its clock moved so that only standbys priming for over stuckPrimingMs are past it.
        const now = Date.now();
        const stuck = world.some(
          (i) =>
            i.state === 'running' &&
            i.tags[keys.warmStandby] === WARM_STANDBY_VALUE &&
            !i.tags[keys.activatedAt] &&
            !i.tags[keys.jobId] &&
            i.launchedAt !== undefined &&
            now - i.launchedAt > stuckPrimingMs,
        );
        if (stuck) {
          const timeout = Math.min(...fleet.config.pools.map((p) => p.warm.primingTimeoutSeconds));
          lambdas.skewNextPoolRun(timeout * 1000 - stuckPrimingMs);
        } else if (await undoSkewedPrimeFailure(clients, fleet.config, Date.now())) {
          backoffSkips++;
        }
      }
      if (jobsDone) {
        const observed = await observeWorld(clients, fleet.config, ciListing(github, gitlab), fleet.deadLetterQueueUrl, targets(fleet.config));
        const left = findLeftovers(fleet.config, keys, observed);
        // Backing off, the pools stay empty by design.
        const full = faults.tamperedDownload || fleet.config.pools.every((p) => parkedOf(observed.instances, fleet.config, p.name).length === p.warm.size);
        // The held jobs' wait copies stay in the queue: jobs waiting, not something left behind.
        const held = faults.tamperedDownload ? jobs.filter((j) => heldByBackoff(events, j)).length : 0;
        const queueSettled = (await queueMessages(clients, fleet.queueUrl)) <= held;
        if (left.instances.length + left.parameters.length + left.registrations.length === 0 && full && queueSettled) {
          settled = true;
          break;
        }
      }
      await sleep(500);
    }
    const endedAt = Date.now();
    // A fault not injected by now never will be: the proof says so (rather than the run waiting for it).
    injectionsEnded = true;
    const injected = await Promise.all(injections);
    await Promise.all([github.hooksSettled(), gitlab.hooksSettled()]);
    await lambdas.stop();
    await player.stop();
    // --scale-set: the stack goes away: the resource's Delete removes the scale set (its session with it).
    let scaleSetDeleteError: string | undefined;
    requestsAtDelete = github.requests().length;
    // Read while the scale set exists (the loopback forgets it with it).
    const peakPolls = scaleSetId !== undefined ? github.scaleSets.peakPolls(scaleSetId) : 0;
    if (scaleSetResource) await scaleSetResource.delete(fleet.config).catch((e: unknown) => (scaleSetDeleteError = (e as Error).message));
    // The Delete removes the scale set's lease item from the job-record table too.
    const leaseItemsAfterDelete = scaleSetId !== undefined ? await leaseItemsLeft(endpoint, jobRecordTableName(prefix), LOCAL_SCALE_SET.pool) : [];

    // 7. The report, from listing moto, the CI servers and this host's users (the player removed its machines' users).
    const world = {
      ...(await observeWorld(clients, fleet.config, ciListing(github, gitlab), fleet.deadLetterQueueUrl, targets(fleet.config))),
      ...(ownUsers ? { users: hostUsers(ownUsers) } : {}),
    };
    const notes: string[] = [];
    if (stranded?.removed.length) notes.push(`removed ${stranded.removed.length} runner user(s) that earlier runs left: ${stranded.removed.join(', ')}`);
    if (stranded?.failed.length) notes.push(`could not remove ${stranded.failed.length} runner user(s) that earlier runs left: ${stranded.failed.join(', ')}`);
    if (aptPools.length) notes.push(`apt pool(s) ${aptPools.join(', ')}: Ubuntu-style machines (no dnf), their install step uses this host's apt-get`);
    if (gaveUp) notes.push(gaveUp);
    else if (o.signal?.aborted) notes.push('interrupted');
    else if (!settled) notes.push(`the run did not settle within ${Math.round(o.deadlineMs / 1000)} s`);
    if (refusal) notes.push(`fault: StartInstances refused ${refusal.refused()} time(s) for ${refusal.instanceId() ?? 'no instance'} (InsufficientInstanceCapacity)`);
    if (faults.stallPriming) notes.push(`fault: one ${gitlabPool} instance never finished priming; evictions ${JSON.stringify(evictions)}; prime back-off waits skipped: ${backoffSkips}`);
    if (o.drift) notes.push(`drift: template versions ${JSON.stringify(templateVersions)}; evictions ${JSON.stringify(evictions)}`);
    for (const d of deliveries) if (d.status !== 202) notes.push(`delivery "${d.what}" answered ${d.status}`);
    for (const d of startDeliveries) if (d.status !== 200) notes.push(`delivery "${d.what}" answered ${d.status}`);
    const unshipped = bootsThatDidNotShip(sandboxRoot);
    if (unshipped.length) notes.push(`boot log not (fully) shipped by ${unshipped.join(', ')}`);
    const requested = o.reuse ? REUSE_WAVES * (REUSE_GITHUB_REPOSITORIES.length + REUSE_GITLAB_PROJECTS.length) : 2 * o.jobs + (faults.duplicate ? 2 : 0) + (o.scaleSet ? SCALE_SET_RECOVERY_JOBS : 0);
    if (jobs.length < requested) notes.push(`only ${jobs.length} of ${requested} jobs were sent`);
    const served = buildReport({ config: fleet.config, jobs, events, world, startedAt, endedAt }).timeline.filter((j) => j.served && j.instanceId);
    const bootLogs = await checkBootLogs(clients, fleet.config.prefix, served.map((j) => j.instanceId!));
    const base = buildReport({ config: fleet.config, jobs, events, world, startedAt, endedAt, notes, bootLogs, settled: settled && jobs.length === requested, slowdown: factor });
    const installs = events.filter((e) => e.kind === 'runner-installed').length;
    const failSafe = faults.tamperedDownload
      ? buildFailSafe({ config: fleet.config, world, events, jobs: base.timeline, primeBackoff: backoff.last, spanSeconds: (endedAt - startedAt + maxSkewMs) / 1000 })
      : undefined;
    const faultProof = plan ? buildFaultProof({ plan, jobs, events, world, report: base, prefix }) : undefined;
    if (lossy.cancelRefused.length) notes.push(`the cancel of ${lossy.cancelRefused.join(', ')} came after a runner took it`);
    const reuse = o.reuse ? buildReuseProof(reuseJobs, readReuseReports(reuseReports)) : undefined;
    const docker = daemon ? dockerProofOf(daemon, jobs, dockerReports, sandboxRoot) : undefined;
    let roll: RollProof | undefined;
    if (releases) {
      const versionOf = new Map(world.instances.map((i) => [i.id, i.tags[tagKeys(prefix).runnerVersion]]));
      const jobsOnOtherRunner = served.filter((j) => versionOf.get(j.instanceId!) !== LOCAL_ROLLED_VERSION).map((j) => `${j.provider} ${j.ciJobId} on ${j.instanceId} (${versionOf.get(j.instanceId!) ?? 'no version'})`);
      const replaced = evictions['stale-runner'] ?? 0;
      roll = { from: LOCAL_RUNNER_VERSION, to: LOCAL_ROLLED_VERSION, replaced, jobsOnOtherRunner, passed: replaced > 0 && jobsOnOtherRunner.length === 0 && served.length === jobs.length };
      notes.push(`roll: ${replaced} parked instance(s) replaced from ${LOCAL_RUNNER_VERSION} to ${LOCAL_ROLLED_VERSION}; jobs on another runner: ${jobsOnOtherRunner.length ? jobsOnOtherRunner.join(', ') : 'none'}`);
    }
    const launchTickets = { ...lambdas.tickets, live: await liveLaunchTickets(endpoint, jobRecordTableName(prefix), endedAt) };
    const scopes = o.scopes ? scopesProofOf(scoped, base, github, gitlab, exhausted) : undefined;
    if (scaleSetDeleteError) notes.push(`the scale-set resource's Delete failed: ${scaleSetDeleteError}`);
    const scaleSet = scaleSetId !== undefined ? scaleSetReportOf(scaleSetId, jobs, base, github, events, lambdas, injected, endedAt, { from: requestsAtCreate, to: requestsAtDelete }, peakPolls, leaseItemsAfterDelete.length) : undefined;
    // --scale-set: the scale set and its session must be gone after the Delete: counted as leftovers too.
    const afterDelete = scaleSetId !== undefined ? [...github.scaleSets.list().flatMap((x) => [`scale set ${x.id} ${x.name}`, ...(x.session ? [`session ${x.session.id} of scale set ${x.id}`] : [])]), ...leaseItemsAfterDelete] : undefined;
    const counted = afterDelete ? { leftovers: base.leftovers + afterDelete.length, leftoverDetail: { ...base.leftoverDetail, scaleSets: afterDelete } } : {};
    const report: LocalReport = { ...base, ...counted, image: { kind: image, installs, downloads }, launchTickets, githubRequestsByApp: requestsByApp(github), ...(scopes ? { scopes } : {}), ...(scaleSet ? { scaleSet } : {}), ...(roll ? { roll } : {}), ...(failSafe ? { failSafe } : {}), ...(faultProof ? { faultProof } : {}), ...(reuse ? { reuse } : {}), ...(docker ? { docker } : {}) };
    return { report, events, deliveries, evictions, templateVersions, refusedStarts: refusal?.refused() ?? 0, fleet, world, logs, queueMessagesPerJob: lambdas.queueMessagesPerJob(), ...(roll ? { roll } : {}) };
  } finally {
    await cleanup();
  }
}

/** The loopback GitHub's authenticated requests per App (JWT and installation token alike): how the Apps shared the load. */
function requestsByApp(github: LoopbackGitHub): Record<string, number> {
  const out: Record<string, number> = Object.fromEntries(github.apps.map((a) => [a.appId, 0]));
  for (const r of github.requests()) if (r.appId !== undefined) out[r.appId] = (out[r.appId] ?? 0) + 1;
  return out;
}

/** `--scale-set`: the proof from the loopback's and the recorder's records, and the two paths' figures. */
function scaleSetReportOf(scaleSetId: number, jobs: readonly ScenarioJob[], report: LocalReport, github: LoopbackGitHub, events: readonly LocalEvent[], lambdas: LocalLambdas, injected: readonly Injection[], endedAt: number, run: { from: number; to: number }, peakPolls: number, leaseItems: number): NonNullable<LocalReport['scaleSet']> {
  const faults = injectedFaults(injected);
  const all = github.requests();
  const hooks = github.scaleSets;
  const ci = new Map(github.jobs().map((j) => [String(j.id), j]));
  const done = events.filter((e) => e.kind === 'job-done' && e.provider === 'github' && e.runnerName);
  const left = report.leftoverDetail;
  const proof = buildScaleSetProof({
    scaleSetId,
    jobs: jobs
      .filter((j) => j.pool === LOCAL_SCALE_SET.pool)
      .map((j) => {
        const c = ci.get(j.ciJobId);
        const assigned = hooks.assignedTo(Number(j.ciJobId));
        return { ciJobId: j.ciJobId, done: c?.status === 'completed' && c.conclusion === 'success', ...(assigned === undefined ? {} : { assignedTo: assigned }), ...(c?.runnerName ? { runnerName: c.runnerName } : {}) };
      }),
    runnersOfJob: (id) => [...new Set(done.filter((e) => e.ciJobId === id).map((e) => e.runnerName!))],
    jobsOfRunner: (name) => [...new Set(done.filter((e) => e.runnerName === name).map((e) => e.ciJobId!))],
    sessions: hooks.sessions(),
    maxConcurrentPolls: peakPolls,
    leases: lambdas.leases?.holdings ?? [],
    demands: lambdas.listenerInvocations.flatMap((i) => i.demands.map((d) => ({ holder: i.id, ...d }))),
    faults,
    leftovers: [...left.instances.map((i) => `instance ${i.id} (${i.pool}, ${i.why})`), ...left.parameters.map((p) => `parameter ${p}`), ...left.registrations.map((r) => `registration ${r.name}`)],
    afterDelete: { scaleSets: hooks.list().length, sessions: hooks.list().filter((s) => s.session).length, leaseItems },
    runnersRegistered: hooks.runnersRegistered(scaleSetId),
    sessionConflicts: all.filter((r) => r.method === 'POST' && new RegExp(`/runnerscalesets/${scaleSetId}/sessions$`).test(r.path) && r.status === 409).length,
    unexpectedQueueRefusals: queueRefusalsOutsideFaults(all, injected.flatMap((i) => i.tokenExpiredAt ?? [])),
    endedAt,
  });
  const served = new Map(report.timeline.map((t) => [t.ciJobId, t.served]));
  const figures = scaleSetFigures(
    jobs.map((j) => {
      const c = ci.get(j.ciJobId);
      const how = served.get(j.ciJobId);
      return {
        path: j.pool === LOCAL_SCALE_SET.pool ? ('scale-set' as const) : ('webhook' as const),
        ...(how ? { served: how } : {}),
        ...(c?.createdAt ? { createdAt: Date.parse(c.createdAt) } : {}),
        ...(c?.startedAt ? { startedAt: Date.parse(c.startedAt) } : {}),
      };
    }),
    github.requests().slice(run.from, run.to),
  );
  const deploy = [...all.slice(0, run.from), ...all.slice(run.to)].filter((r) => r.credential === 'actions-service' || r.credential === 'installation' || r.credential === 'app');
  return { proof, figures, deployRequests: deploy.length };
}

/** The scale-set pool's lease item, if the job-record table still has it (one line for the leftovers). */
async function leaseItemsLeft(endpoint: string, table: string, pool: string): Promise<string[]> {
  const key = scaleSetLeaseKey(pool);
  const out = await localDynamo(endpoint).send(new GetItemCommand({ TableName: table, Key: { [JOB_RECORD_ATTRIBUTES.key]: { S: key } }, ConsistentRead: true }));
  return out.Item ? [`lease item ${key}`] : [];
}

/** `--scopes`: each job's scope, pool and the scope of the runner that ran it (`org:example-partner`, `group_type:43`), and the Apps. */
function scopesProofOf(sent: readonly SentScopedJob[], report: LocalReport, github: LoopbackGitHub, gitlab: LoopbackGitLab, exhausted: Parameters<typeof buildScopesProof>[0]['exhausted']): ScopesProof {
  const ran = new Map<string, string | undefined>([...github.jobs().map((j) => [`github ${j.id}`, j.runnerScope] as const), ...gitlab.jobs().map((j) => [`gitlab ${j.id}`, j.runnerScope] as const)]);
  const served = new Set(report.timeline.filter((j) => j.served).map((j) => `${j.provider} ${j.ciJobId}`));
  return buildScopesProof({
    sent,
    ranOn: (provider, id) => ran.get(`${provider} ${id}`),
    served: (provider, id) => served.has(`${provider} ${id}`),
    apps: github.apps.map((a) => a.appId),
    requests: github.requests(),
    ...(exhausted ? { exhausted } : {}),
  });
}

/** The docker run's proof: the fake runners' reports, the daemon as the run leaves it, the install figure from the boot logs. */
function dockerProofOf(daemon: LocalDockerDaemon, jobs: readonly ScenarioJob[], reportsDir: string, sandboxRoot: string): DockerProof {
  let state: DockerDaemonState;
  try {
    const left = daemon.leftovers();
    state = { ...left, imageKept: daemon.docker(['image', 'ls', '-q', LOCAL_DOCKER_IMAGE]) !== '' };
  } catch (error) {
    state = { containers: [`(the daemon did not answer: ${(error as Error).message.split('\n')[0]})`], networks: [], volumes: [], imageKept: false };
  }
  const logs = readdirSync(sandboxRoot).flatMap((id) => {
    const { consoleLog } = machineAt(join(sandboxRoot, id));
    return existsSync(consoleLog) ? [readFileSync(consoleLog, 'utf8')] : [];
  });
  return buildDockerProof(jobs, readDockerReports(reportsDir), state, dockerInstallFigure(logs));
}

/** The stored release version of each provider a pool follows ('' where none is stored yet). */
async function storedReleases(clients: LocalAwsClients, prefix: string, providers: readonly Provider[]): Promise<string[]> {
  const paths = ssmPaths(prefix);
  return Promise.all(
    [...new Set(providers)].map(async (p) => {
      try {
        const out = await clients.ssm.send(new GetParameterCommand({ Name: paths.runnerRelease(p) }));
        return out.Parameter?.Value?.split(' ')[0] ?? '';
      } catch {
        return '';
      }
    }),
  );
}

/** Machines whose console log holds the boot script's warning that its log did not (all) reach CloudWatch Logs. */
function bootsThatDidNotShip(sandboxRoot: string): string[] {
  const ids: string[] = [];
  for (const id of readdirSync(sandboxRoot)) {
    const { consoleLog } = machineAt(join(sandboxRoot, id));
    if (existsSync(consoleLog) && readFileSync(consoleLog, 'utf8').includes('boot log not (fully) shipped')) ids.push(id);
  }
  return ids;
}

/**
 * The fleet's webhook, set at both CI servers as its URL and secret are at GitHub and GitLab:
 * each job a runner takes is announced (GitHub `in_progress`, GitLab `running`) through the
 * same Function URL event as the queued deliveries, so the ledger's job-started stage is
 * measured. Acknowledged, not queued: each answer should be 200. Returns the answers' log.
 */
function connectJobStartHooks(github: LoopbackGitHub, gitlab: LoopbackGitLab, secrets: { githubSecret: string; gitlabToken: string }, lambdas: LocalLambdas) {
  const answered: { what: string; status: number }[] = [];
  const send = async (d: Delivery) => {
    const status = (await lambdas.webhook(d)).statusCode ?? 0;
    answered.push({ what: `${d.path.slice(1)} job start ${d.deliveryId}`, status });
    return status;
  };
  github.setWebhook({ secret: secrets.githubSecret, send });
  gitlab.setWebhook({ secret: secrets.gitlabToken, send });
  return answered;
}

function targets(config: FleetConfig): Record<string, number> {
  return Object.fromEntries(config.pools.map((p) => [p.name, p.warm.size]));
}

function ciListing(github: LoopbackGitHub, gitlab: LoopbackGitLab) {
  return {
    registrations: () => [
      ...github.runners().map((r) => ({ provider: 'github', id: String(r.id), name: r.name })),
      ...gitlab.runners().map((r) => ({ provider: 'gitlab', id: String(r.id), name: r.description })),
    ],
    jobs: () => [
      ...github.jobs().map((j) => ({
        provider: 'github',
        id: String(j.id),
        done: j.status === 'completed' && j.conclusion === 'success',
        ...(j.status === 'completed' && j.conclusion === 'failure' ? { failed: true } : {}),
        ...(j.conclusion === 'cancelled' ? { cancelled: true } : {}),
        ...(j.runnerName ? { runnerName: j.runnerName } : {}),
        ...(j.createdAt ? { createdAt: j.createdAt } : {}),
        ...(j.startedAt ? { startedAt: j.startedAt } : {}),
      })),
      ...gitlab.jobs().map((j) => {
        const runner = j.runnerId === undefined ? undefined : gitlab.runners().find((r) => r.id === j.runnerId);
        const times = { ...(j.createdAt ? { createdAt: j.createdAt } : {}), ...(j.startedAt ? { startedAt: j.startedAt } : {}) };
        const ended = { ...(j.status === 'failed' ? { failed: true } : {}), ...(j.status === 'canceled' ? { cancelled: true } : {}) };
        return { provider: 'gitlab', id: String(j.id), done: j.status === 'success', ...ended, ...(runner ? { runnerName: runner.description } : {}), ...times };
      }),
    ],
  };
}

/** The CI server has finished the job: done, or failed (its runner was lost mid-job). */
function doneAtCi(job: ScenarioJob, github: LoopbackGitHub, gitlab: LoopbackGitLab): boolean {
  if (job.provider === 'github') return github.jobs().some((j) => String(j.id) === job.ciJobId && j.status === 'completed');
  return gitlab.jobs().some((j) => String(j.id) === job.ciJobId && (j.status === 'success' || j.status === 'failed' || j.status === 'canceled'));
}

function traceOf(events: readonly LocalEvent[], job: ScenarioJob): string | undefined {
  return events.find((e) => e.kind === 'queued' && e.provider === job.provider && e.ciJobId === job.ciJobId)?.traceId;
}

function startedOrDone(events: readonly LocalEvent[], job: ScenarioJob, github: LoopbackGitHub, gitlab: LoopbackGitLab): boolean {
  const trace = traceOf(events, job);
  return doneAtCi(job, github, gitlab) || (trace !== undefined && events.some((e) => (e.kind === 'started' || e.kind === 'dead-lettered') && e.traceId === trace));
}

/** The job's latest scale-up fact is a hold by the prime back-off: it waits as a wait copy in the queue. */
function heldByBackoff(events: readonly LocalEvent[], job: ScenarioJob): boolean {
  const trace = traceOf(events, job);
  const last = trace === undefined ? undefined : events.filter((e) => e.traceId === trace && (e.kind === 'held' || e.kind === 'started' || e.kind === 'dead-lettered')).at(-1);
  return last?.kind === 'held';
}


/**
 * The reuse run's first wave is over: every job done at its CI server, and the machine it
 * reported running on parked again (stopped, no activation left) or gone (it terminated instead:
 * its scope's second job then misses, which the proof reports).
 */
function waveParked(
  wave: readonly ScenarioJob[],
  reports: Readonly<Record<string, { readonly instance: string }>>,
  world: readonly ObservedInstance[],
  keys: ReturnType<typeof tagKeys>,
  done: (j: ScenarioJob) => boolean,
): boolean {
  return wave.every((j) => {
    if (!done(j)) return false;
    // A job without a report names no machine to wait for: the proof reports it.
    const instance = reports[`${j.provider}-${j.ciJobId}`]?.instance;
    if (instance === undefined) return true;
    const i = world.find((w) => w.id === instance);
    if (!i) return false;
    return i.state === 'terminated' || (i.state === 'stopped' && !i.tags[keys.activatedAt]);
  });
}

function parkedOf(world: readonly ObservedInstance[], config: FleetConfig, pool: string): ObservedInstance[] {
  const keys = tagKeys(config.prefix);
  const version = config.pools.find((p) => p.name === pool)?.launchTemplateVersion;
  return world.filter(
    (i) =>
      i.state === 'stopped' &&
      i.tags[keys.pool] === pool &&
      i.tags[keys.warmStandby] === WARM_STANDBY_VALUE &&
      !i.tags[keys.activatedAt] &&
      !i.tags[keys.jobId] &&
      (version === undefined || i.tags[LAUNCH_TEMPLATE_VERSION_TAG] === version),
  );
}

/** Messages in the jobs queue, visible or not (an early wait copy is hidden until its time: FIFO has no delay). */
async function queueMessages(clients: LocalAwsClients, queueUrl: string): Promise<number> {
  const out = await clients.sqs.send(
    new GetQueueAttributesCommand({ QueueUrl: queueUrl, AttributeNames: ['ApproximateNumberOfMessages', 'ApproximateNumberOfMessagesNotVisible'] }),
  );
  return Number(out.Attributes?.ApproximateNumberOfMessages ?? '0') + Number(out.Attributes?.ApproximateNumberOfMessagesNotVisible ?? '0');
}

class WaitTimeout extends Error {}

async function waitFor(what: string, deadline: number, signal: AbortSignal | undefined, check: () => Promise<boolean>): Promise<void> {
  while (!(await check())) {
    if (signal?.aborted) throw new WaitTimeout(`interrupted while waiting for ${what}`);
    if (Date.now() > deadline) throw new WaitTimeout(`gave up waiting for ${what} at the deadline`);
    await sleep(250);
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function awsCliPath(): string {
  try {
    const found = execFileSync('bash', ['-c', 'command -v aws'], { encoding: 'utf8' }).trim();
    // A pyenv shim runs several bash scripts before the CLI, on each of the hundreds of calls
    // the played machines make (about a third of each call's CPU): the real path instead.
    if (!/\/shims\/aws$/.test(found)) return found;
    try {
      return execFileSync('pyenv', ['which', 'aws'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim() || found;
    } catch {
      return found;
    }
  } catch {
    throw new Error('the aws CLI is not on PATH: the instances\' boot scripts need it (pip install awscli)');
  }
}

/**
 * The pool run whose clock was moved past the priming timeout (to evict the stuck standby)
 * records that failed prime at its moved time, in the future: the prime back-off would then
 * hold the refill back for the skew plus its delay. The harness undoes its own skew: a
 * failure recorded in the future is set to the time at which its back-off delay has just
 * passed, so the next pool run refills at once. Returns whether it changed a pool's state.
 * (The back-off itself is proven in test/pool/backoff.test.ts on a simulated clock.)
 */
async function undoSkewedPrimeFailure(clients: LocalAwsClients, config: FleetConfig, now: number): Promise<boolean> {
  const paths = ssmPaths(config.prefix);
  let changed = false;
  for (const pool of config.pools) {
    const name = paths.primeState(pool.name);
    const streak = await readPrimeStreak(clients, config, pool.name);
    if (!streak?.lastFailureAt || streak.failures === 0 || Date.parse(streak.lastFailureAt) <= now) continue;
    const delayMs = delaySeconds(streak.failures, { limit: pool.warm.primeFailureLimit, capSeconds: pool.warm.primeBackoffCapSeconds }) * 1000;
    const undone = { ...streak, lastFailureAt: new Date(now - delayMs).toISOString() };
    await clients.ssm.send(new PutParameterCommand({ Name: name, Value: encodeStreak(undone), Type: 'String', Overwrite: true }));
    changed = true;
  }
  return changed;
}
