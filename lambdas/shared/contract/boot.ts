/**
 * What the boot script and the control plane agree on about one instance's boot:
 * the modes, the runner config parameter's value, runner names and the log lines
 * that other components parse.
 */
import { AFFINITY_PATTERN, assertPrefix, INSTANCE_ID_PATTERN } from './names';

export const BOOT_MODES = ['RUN', 'PRIME', 'WAIT'] as const;
/**
 * RUN: a config parameter for this instance exists, start the runner.
 * PRIME: a warm standby not yet activated, prepare and power off.
 * WAIT: anything else, poll for the config parameter within a bound.
 */
export type BootMode = (typeof BOOT_MODES)[number];

/**
 * The CI service a pool serves. The values are the strings the FleetConfig JSON, the job
 * messages and the runner config carry.
 */
export enum Provider {
  /** GitHub Actions (a GitHub App registers just-in-time runners). */
  GITHUB = 'github',
  /** GitLab CI (one runner created per instance through the GitLab API). */
  GITLAB = 'gitlab',
}

export const PROVIDERS: readonly Provider[] = [Provider.GITHUB, Provider.GITLAB];

export function isProvider(value: unknown): value is Provider {
  return typeof value === 'string' && (PROVIDERS as readonly string[]).includes(value);
}

/**
 * The text each runner writes to its output when it takes a job; the boot script watches the
 * runner's output for it and then tags its own instance `jobStarted`.
 * - GitHub: the listener's `<time>: Running job: <name>` line, written to its terminal when it
 *   dispatches the job to a worker (actions/runner, JobDispatcher).
 * - GitLab: `Checking for jobs... received` (with `job=<id>`), which gitlab-runner logs when
 *   `POST /jobs/request` hands it a job (network/gitlab.go), in text and JSON log formats alike.
 */
export const JOB_START_LINES: Readonly<Record<Provider, string>> = {
  [Provider.GITHUB]: 'Running job: ',
  [Provider.GITLAB]: 'Checking for jobs... received',
};

export const RUNNER_CONFIG_VERSION = 1;

/**
 * The runner config parameter's value. It is a list of `key=value` lines rather than
 * JSON so the boot script parses it with shell builtins alone (no jq on stock AMIs);
 * values never contain a newline, and only the first "=" separates key from value.
 */
export const RUNNER_CONFIG_KEYS = {
  version: 'version',
  provider: 'provider',
  /**
   * The instance the config is for (defence in depth beside IAM): the boot script refuses a
   * config that names another instance, and deletes nothing of it.
   */
  instance: 'instance',
  /** GitHub: the encoded JIT config for `run.sh --jitconfig`. */
  jitConfig: 'jitconfig',
  /** GitLab: the instance URL for `gitlab-runner run-single --url`. */
  url: 'url',
  /** GitLab: the runner authentication token (glrt-...) for `--token`. */
  token: 'token',
  /**
   * Reuse (contract reuse.ts): the job's affinity. Present only for a reusable pool: the boot
   * script refuses it when it differs from the affinity the instance parked with (R1).
   */
  affinity: 'affinity',
  /** Reuse: the use count scale-up saw on the instance (0 for a fresh one); a mismatch is refused (R4). */
  uses: 'uses',
} as const;

/** What a config for a reusable pool's instance adds (absent for every other pool). */
export interface RunnerConfigReuse {
  readonly affinity: string;
  readonly uses: number;
}

export type RunnerConfig = (
  | { readonly provider: 'github'; readonly instanceId: string; readonly jitConfig: string }
  | { readonly provider: 'gitlab'; readonly instanceId: string; readonly url: string; readonly token: string }
) & { readonly reuse?: RunnerConfigReuse };

const SAFE_VALUE = /^[^\s]+$/;

export function encodeRunnerConfig(config: RunnerConfig): string {
  const k = RUNNER_CONFIG_KEYS;
  const fields: [string, string][] = [
    [k.version, String(RUNNER_CONFIG_VERSION)],
    [k.provider, config.provider],
    [k.instance, config.instanceId],
  ];
  if (!INSTANCE_ID_PATTERN.test(config.instanceId)) throw new Error(`runner config instance "${config.instanceId}" is not an EC2 instance id`);
  if (config.provider === 'github') {
    fields.push([k.jitConfig, config.jitConfig]);
  } else {
    if (!/^https?:\/\//.test(config.url)) throw new Error('runner config url must be an http(s) URL');
    fields.push([k.url, config.url], [k.token, config.token]);
  }
  if (config.reuse) {
    if (!new RegExp(AFFINITY_PATTERN).test(config.reuse.affinity)) throw new Error(`runner config affinity "${config.reuse.affinity}" does not match ${AFFINITY_PATTERN}`);
    if (!Number.isSafeInteger(config.reuse.uses) || config.reuse.uses < 0) throw new Error('runner config uses must be a non-negative integer');
    fields.push([k.affinity, config.reuse.affinity], [k.uses, String(config.reuse.uses)]);
  }
  for (const [key, value] of fields) {
    // The value itself is a secret: name the field, never the value.
    if (!SAFE_VALUE.test(value)) throw new Error(`runner config field "${key}" is empty or contains whitespace`);
  }
  return fields.map(([key, value]) => `${key}=${value}`).join('\n') + '\n';
}

export function decodeRunnerConfig(text: string): RunnerConfig {
  const k = RUNNER_CONFIG_KEYS;
  const fields = new Map<string, string>();
  for (const line of text.split('\n')) {
    if (line === '') continue;
    const at = line.indexOf('=');
    if (at <= 0) throw new Error('runner config has a line without "key="');
    fields.set(line.slice(0, at), line.slice(at + 1));
  }
  if (fields.get(k.version) !== String(RUNNER_CONFIG_VERSION)) {
    throw new Error(`runner config version must be ${RUNNER_CONFIG_VERSION}`);
  }
  const provider = fields.get(k.provider);
  const need = (key: string): string => {
    const value = fields.get(key);
    if (!value) throw new Error(`runner config for ${provider} lacks "${key}"`);
    return value;
  };
  const instanceId = need(k.instance);
  if (!INSTANCE_ID_PATTERN.test(instanceId)) throw new Error(`runner config instance "${instanceId}" is not an EC2 instance id`);
  let reuse: RunnerConfigReuse | undefined;
  if (fields.has(k.affinity) || fields.has(k.uses)) {
    const affinity = need(k.affinity);
    const uses = need(k.uses);
    if (!new RegExp(AFFINITY_PATTERN).test(affinity)) throw new Error(`runner config "${k.affinity}" does not match ${AFFINITY_PATTERN}`);
    if (!/^\d{1,6}$/.test(uses)) throw new Error(`runner config "${k.uses}" must be a non-negative integer`);
    reuse = { affinity, uses: Number(uses) };
  }
  const extra = reuse ? { reuse } : {};
  if (provider === 'github') return { provider, instanceId, jitConfig: need(k.jitConfig), ...extra };
  if (provider === 'gitlab') return { provider, instanceId, url: need(k.url), token: need(k.token), ...extra };
  throw new Error(`runner config provider must be one of ${PROVIDERS.join(', ')}`);
}

/**
 * Runner names are unique per activation: a re-parked instance that is activated again
 * must not collide with its earlier registration. The instance id stays recoverable so
 * the sweep can match registrations to instances.
 */
export function runnerName(prefix: string, instanceId: string, activatedAt: Date): string {
  return `${prefix}-${instanceId}-${activatedAt.getTime().toString(36)}`;
}

/** The instance id inside a runner name built by `runnerName`, or undefined. */
export function instanceIdOfRunnerName(prefix: string, name: string): string | undefined {
  if (!name.startsWith(`${prefix}-`)) return undefined;
  const match = /^(i-[0-9a-f]{8,17})-[0-9a-z]+$/.exec(name.slice(prefix.length + 1));
  return match?.[1];
}

/** The activation time inside a runner name built by `runnerName`, or undefined. */
export function activationTimeOfRunnerName(prefix: string, name: string): Date | undefined {
  if (instanceIdOfRunnerName(prefix, name) === undefined) return undefined;
  const ms = parseInt(name.slice(name.lastIndexOf('-') + 1), 36);
  return Number.isSafeInteger(ms) ? new Date(ms) : undefined;
}

/**
 * The boot script's log lines that other components parse (the instance log metric
 * filter, the local sandbox). `<key>=<value>` tokens separated by spaces.
 */
export const BOOT_LOG_KEYS = {
  /** Seconds from the activation tag to the runner's start, on a RUN boot of an activated instance. */
  activationLatency: 'activation-latency-seconds',
  /** The mode this boot chose. */
  mode: 'boot-mode',
  traceId: 'trace-id',
} as const;

/**
 * The CloudWatch log group the boot script ships its own log lines to, one stream per
 * instance named after the instance id. The fleet creates it (and grants the instance role
 * write access to it alone); the renderer puts the same name into the script.
 */
export function bootLogGroupName(prefix: string): string {
  assertPrefix(prefix);
  return `/${prefix}/runners/boot`;
}
