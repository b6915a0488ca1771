import { buildFleetConfig, DEFAULT_PREFIX, metricNamespaceProblem, prefixProblem, Provider, type FleetConfig } from '../lambdas/shared/contract';
import { FleetConfigError } from '../lambdas/shared/contract/config-checker';
import { DEFAULT_INSTANCE_TYPE, fleetConfigInput } from './fleet-config-input';
import { instanceTypeArchitecture, machineImageArchitecture, RunnerImageArchitecture } from './image-architecture';
import { overlapRefusals } from './overlap-check';
import { poolPrepareCommands } from './pool-prepare-commands';
import { poolPropWhere, propProblemsMessage } from './prop-paths';
import type { RunnerPoolProps } from './props';
import { knownRootDeviceName, poolRootDeviceName, rootDeviceNameProblem } from './root-device';
import { followsLatestRunner } from './runner-version';
import { resolveUserDataOptions } from './user-data';
import type { WarmRunnersProps } from './warm-runners';

/**
 * Checks the props before any resource exists, so a mistake fails `cdk synth` with a message
 * that names the bad value and says what to do. The contract's FleetConfig builder runs once
 * with placeholder ids: every rule it enforces at runtime is enforced here too.
 */
export function validateWarmRunnersProps(props: WarmRunnersProps): void {
  const prefix = props.prefix ?? DEFAULT_PREFIX;
  const problem = prefixProblem(prefix);
  if (problem) throw new Error(problem);
  if (props.pools.length === 0) throw new Error('pools is empty: configure at least one runner pool');
  for (const [i, pool] of props.pools.entries()) {
    const where = (field: string) => poolPropWhere(i, pool.name, field);
    if (pool.instanceTypes !== undefined && pool.instanceTypes.length === 0) {
      throw new Error(`${where('instanceTypes')} is empty; list at least one instance type or leave it out for the default`);
    }
    const disk = pool.diskSize?.toGibibytes();
    if (disk !== undefined && (disk < 8 || disk > 16_384)) {
      throw new Error(`${where('diskSize')} must be from 8 GiB to 16384 GiB (16 TiB, the most a gp3 volume holds), got ${disk} GiB`);
    }
    const commands = poolPrepareCommands(pool, where);
    followsLatestRunner(pool, where);
    const nul = commands.findIndex((command) => command.includes('\0'));
    if (nul >= 0) throw new Error(`${where(`${pool.prepareCommands === undefined ? 'warm.prepareCommands' : 'prepareCommands'}[${nul}]`)} contains a NUL byte, which no shell command can hold`);
    const deviceProblem = rootDeviceNameProblem(poolRootDeviceName(pool, props.rootDeviceName), knownRootDeviceName(pool.machineImage));
    if (deviceProblem) {
      const device = pool.rootDeviceName !== undefined ? where('rootDeviceName') : `rootDeviceName (for pool "${pool.name}")`;
      throw new Error(`${device} ${deviceProblem.replace(/^rootDeviceName /, '')}`);
    }
    const archProblem = poolArchitectureProblem(pool, i);
    if (archProblem) throw new Error(archProblem);
    const cacheProblem = reuseCacheProblem(prefix, pool);
    if (cacheProblem) throw new Error(`${where(cacheProblem.prop)} ${cacheProblem.why}`);
  }
  const batch = props.scaleUpBatchSize ?? 10;
  if (!Number.isInteger(batch) || batch < 1 || batch > 10) {
    throw new Error(`scaleUpBatchSize ${batch} must be an integer from 1 to 10 (the most a FIFO queue's event source allows)`);
  }
  const concurrency = props.scaleUpMaxConcurrency ?? 5;
  if (!Number.isInteger(concurrency) || concurrency < 2 || concurrency > 1000) {
    throw new Error(`scaleUpMaxConcurrency ${concurrency} must be an integer from 2 to 1000 (Lambda's range for SQS maximum concurrency)`);
  }
  const reserved = props.webhookReservedConcurrency;
  if (reserved !== undefined && (!Number.isInteger(reserved) || reserved < 1)) {
    throw new Error(
      `webhookReservedConcurrency ${reserved} must be a positive integer (0 would throttle every delivery): ` +
        'set the most concurrent webhook invocations to reserve (docs/operations.md, "Webhook reserved concurrency"), or leave it unset to share the unreserved pool',
    );
  }
  for (const [name, value, most] of [
    ['redeliverLimit', props.redeliverLimit, 100],
    ['reconcileRunReadLimit', props.reconcileRunReadLimit, 1000],
  ] as const) {
    if (value !== undefined && (!Number.isInteger(value) || value < 0 || value > most)) {
      throw new Error(`${name} ${value} must be an integer from 0 to ${most}: each unit is one GitHub request per reconciler run (docs/control-plane.md, "Reconciler")`);
    }
  }
  const perRun = props.reconcileRepositoriesPerRun;
  if (perRun !== undefined && (!Number.isInteger(perRun) || perRun < 1 || perRun > 500)) {
    throw new Error(
      `reconcileRepositoriesPerRun ${perRun} must be an integer from 1 to 500: each repository costs two GitHub requests per reconciler run, ` +
        'and a run must read them within its 120 s timeout (docs/control-plane.md, "Reconciler")',
    );
  }
  const retryAfter = props.jobRetryAfter?.toSeconds();
  if (retryAfter !== undefined && (retryAfter < 60 || retryAfter > 12 * 60 * 60)) {
    throw new Error(
      `jobRetryAfter ${props.jobRetryAfter!.toHumanString()} must be from 1 minute to 12 hours: a runner needs a minute or more to boot and take its job, and a retry check hides in the queue for at most 12 hours`,
    );
  }
  const retryLimit = props.jobRetryLimit;
  if (retryLimit !== undefined && (!Number.isInteger(retryLimit) || retryLimit < 0 || retryLimit > 10)) {
    throw new Error(`jobRetryLimit ${retryLimit} must be an integer from 0 to 10: each retry starts one more runner for the job`);
  }
  const namespaceProblem = props.metricNamespace === undefined ? undefined : metricNamespaceProblem(props.metricNamespace);
  if (namespaceProblem) throw new Error(namespaceProblem);
  for (const [name, interval] of [
    ['poolInterval', props.poolInterval],
    ['scaleDownInterval', props.scaleDownInterval],
    ['reconcileInterval', props.reconcileInterval],
  ] as const) {
    if (interval && (interval.toSeconds() < 60 || interval.toSeconds() % 60 !== 0)) {
      throw new Error(`${name} ${interval.toHumanString()} must be a whole number of minutes, at least one (EventBridge rates are in minutes)`);
    }
  }
  let config: FleetConfig;
  try {
    config = buildFleetConfig(
      fleetConfigInput(props, () => ({ launchTemplateId: 'lt-placeholder', launchTemplateVersion: '1', subnetIds: ['subnet-placeholder'] })),
    );
  } catch (e) {
    // The contract names fields by their path in the FleetConfig; name the props instead.
    if (e instanceof FleetConfigError) throw new Error(propProblemsMessage(e.problems, props));
    throw e;
  }
  const refusals = overlapRefusals(config);
  if (refusals.length > 0) throw new Error(refusals.join('\n'));
}

/** An instance type of each architecture, for the fix an error message suggests. */
const EXAMPLE_TYPE: Record<RunnerImageArchitecture, string> = { x86_64: 'm7i.large', arm64: 'm7g.large' };

/**
 * An AMI runs on one architecture: a launch of an instance type of another fails after deploy
 * (CreateFleet and RunInstances refuse it), so every cold launch and standby of the pool would.
 * Refused here where the architectures are known (instanceTypeArchitecture,
 * machineImageArchitecture); where the image's is not, only a pool mixing architectures is.
 */
function poolArchitectureProblem(pool: RunnerPoolProps, index: number): string | undefined {
  const where = poolPropWhere(index, pool.name, 'instanceTypes');
  const types = (pool.instanceTypes ?? [DEFAULT_INSTANCE_TYPE]).map((t) => ({ name: t.toString(), arch: instanceTypeArchitecture(t) }));
  const known = types.filter((t): t is { name: string; arch: RunnerImageArchitecture } => t.arch !== undefined);
  const archs = [...new Set(known.map((t) => t.arch))];
  if (archs.length > 1) {
    return (
      `${where} mixes architectures: ${known.map((t) => `${t.name} is ${t.arch}`).join(', ')}; a pool's image runs on one architecture, ` +
      'so launches of the other types would fail: make one pool per architecture, each with an image of its own architecture'
    );
  }
  const image = machineImageArchitecture(pool.machineImage);
  const foreign = known.filter((t) => image !== undefined && t.arch !== image);
  if (image === undefined || foreign.length === 0) return undefined;
  const given = pool.instanceTypes === undefined ? `is not set, and its default ${foreign[0]!.name} is ${foreign[0]!.arch}` : `holds ${foreign.map((t) => `${t.name} (${t.arch})`).join(', ')}`;
  return (
    `${where} ${given}, but the pool's machineImage is ${image}: every launch would fail. ` +
    `Give ${image} instance types (such as ${EXAMPLE_TYPE[image]}), or an image of ${foreign[0]!.arch} ` +
    `(e.g. latestAmazonLinux2023({ cpuType: AmazonLinuxCpuType.${foreign[0]!.arch === RunnerImageArchitecture.ARM64 ? 'ARM_64' : 'X86_64'} }), or a RunnerImage of that architecture)`
  );
}

/**
 * A cache directory survives every job, so it must not overlap what the boot script removes
 * or trusts after a job: the runner directory (registration, workspace), the runner user's
 * home itself (cleaned except the cache directories inside it), the boot script's state (the
 * resume check reads it) and its hook and log. The contract (`cacheDirectoryProblem`) checks
 * the fixed system directories; these depend on the pool's settings.
 */
function reuseCacheProblem(prefix: string, pool: RunnerPoolProps): { prop: string; why: string } | undefined {
  if (!pool.reuse) return undefined;
  const dirs = pool.reuse.cacheDirectories ?? [];
  let resolved: ReturnType<typeof resolveUserDataOptions>;
  try {
    resolved = resolveUserDataOptions({ prefix, provider: pool.provider, ...(pool.runnerUser ? { runnerUser: pool.runnerUser } : {}), ...(pool.runnerDirectory ? { runnerDir: pool.runnerDirectory } : {}) });
  } catch {
    return undefined; // the launch template's rendering names that problem
  }
  const overlaps = (a: string, b: string) => a === b || a.startsWith(`${b}/`) || b.startsWith(`${a}/`);
  const inside = (a: string, b: string) => a === b || b.startsWith(`${a}/`);
  const home = `/home/${resolved.runnerUser}`;
  // The boot script empties the home after every job; it refuses to when the runner is in it, so every job would terminate.
  if (inside(home, resolved.runnerDir)) {
    return { prop: 'runnerDirectory', why: `${resolved.runnerDir} lies in the runner user's home ${home}, which reuse empties after every job; put the runner outside it (e.g. /opt/actions-runner)` };
  }
  for (const [k, dir] of dirs.entries()) {
    const prop = `reuse.cacheDirectories[${k}]`;
    if (overlaps(dir, resolved.runnerDir)) return { prop, why: `"${dir}" overlaps the runner directory ${resolved.runnerDir}, whose registration and workspace are removed after every job; use a directory of its own` };
    if (inside(dir, home)) return { prop, why: `"${dir}" is or holds the runner user's home ${home}, which is cleaned after every job except the cache directories inside it; list directories inside it instead` };
    const own = [resolved.hostPaths.stateDir, resolved.hostPaths.hookPath, resolved.hostPaths.logFile].find((p) => overlaps(dir, p));
    if (own) return { prop, why: `"${dir}" overlaps ${own}, which the boot script owns (jobs must not write it); use a directory of its own` };
  }
  return undefined;
}

/**
 * Pools with `reuse` but no warm pool: parked reused instances count against the warm target,
 * so with a target of 0 at every hour the pool evicts each one on its next run (over-target)
 * and no job ever finds a cache. A warning, not an error: the pool still works, without reuse.
 */
export function reuseWithoutWarmPoolWarnings(props: WarmRunnersProps): string[] {
  return props.pools
    .map((pool, i) => ({ pool, i }))
    .filter(({ pool }) => pool.reuse && (pool.warm?.size ?? 0) === 0 && !(pool.warm?.schedule ?? []).some((e) => e.size > 0))
    .map(
      ({ pool, i }) =>
        `${poolPropWhere(i, pool.name, 'reuse')} is set but the pool has no warm pool (warm.size 0 and no schedule window above 0): parked reused instances count against the warm target, ` +
        'so the pool evicts each one on its next run and no job finds a cache. Give the pool a warm.size (or a schedule), or remove reuse.',
    );
}

/**
 * Where a job cannot see the same prepared machine warm or cold, or a prop is deprecated: one
 * warning per pool and cause, for `cdk synth` to show. Keys are the warnings' ids.
 */
export function prepareCommandWarnings(props: WarmRunnersProps): { id: string; message: string }[] {
  const out: { id: string; message: string }[] = [];
  for (const [i, pool] of props.pools.entries()) {
    if (pool.warm?.prepareCommands !== undefined && pool.prepareCommands === undefined) {
      out.push({
        id: 'cdk-warm-runners:warm-prepare-commands-deprecated',
        message: `${poolPropWhere(i, pool.name, 'warm.prepareCommands')} is deprecated: the prepare commands now run on cold launches too (before the runner starts). Move them to the pool's prepareCommands.`,
      });
    }
    if (pool.reuse && poolPrepareCommands(pool).length > 0) {
      out.push({
        id: 'cdk-warm-runners:prepare-commands-reuse',
        message:
          `${poolPropWhere(i, pool.name, 'prepareCommands')}: a reused instance does not run its prepare commands again: a later job finds what they made as the earlier jobs of the same ` +
          `${pool.provider === Provider.GITLAB ? 'project' : 'repository'} left it (reuse removes their containers, networks and volumes and the paths outside the cache directories a job can write). ` +
          'Make the jobs tolerate that, or bake what the commands make into the image (RunnerImage steps), or remove reuse.',
      });
    }
  }
  return out;
}

/** Labels GitHub gives its hosted runners (ubuntu-24.04, windows-latest, macos-15, ...). */
const GITHUB_HOSTED_LABEL = /^(ubuntu|windows|macos)(-|$)|-latest$/i;

/**
 * GitHub pools that would take jobs meant for GitHub's hosted runners: without
 * requireSelfHostedLabel a pool serves any job whose labels it matches, and GitHub itself
 * warns that a `runs-on` without "self-hosted" can go to hosted runners. A pool named or
 * labelled like a hosted runner would launch an instance for every such job of the
 * installation. One warning per pool, for `cdk synth` to show.
 */
export function hostedLabelWarnings(props: WarmRunnersProps): string[] {
  const out: string[] = [];
  for (const [i, pool] of props.pools.entries()) {
    if (pool.provider !== Provider.GITHUB || pool.requireSelfHostedLabel) continue;
    const hosted = (pool.labels ?? [pool.name]).filter((l) => GITHUB_HOSTED_LABEL.test(l));
    if (hosted.length === 0) continue;
    out.push(
      `${poolPropWhere(i, pool.name, 'labels')}: label${hosted.length > 1 ? 's' : ''} ${hosted.map((l) => `"${l}"`).join(', ')} look${hosted.length > 1 ? '' : 's'} like GitHub-hosted runner labels, ` +
        'and the pool serves jobs that do not ask for "self-hosted": jobs meant for hosted runners would start instances here. ' +
        'Rename the labels, or set requireSelfHostedLabel: true to serve only jobs whose runs-on includes "self-hosted".',
    );
  }
  return out;
}

/**
 * A fleet whose alarms have no actions: they change state in CloudWatch and notify no one, so
 * a wrong webhook secret or a failing function is found only by someone looking. A warning,
 * not an error: a team may attach its actions itself (an aspect, or `WarmRunners.alarms`).
 */
export function alarmActionWarnings(props: WarmRunnersProps): string[] {
  if ((props.alarmActions ?? []).length > 0) return [];
  return [
    "alarmActions is not set: the fleet's alarms notify no one (a wrong webhook secret, failing functions and lost deliveries change an alarm's state in CloudWatch, and nobody hears of it). " +
      'Pass alarmActions, e.g. [new cloudwatch_actions.SnsAction(topic)], or add actions to WarmRunners.alarms yourself.',
  ];
}
