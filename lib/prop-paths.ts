import { displayPath, type ConfigProblem } from '../lambdas/shared/contract/config-checker';
import type { GitLabConnectionProps } from './props';

/**
 * FleetConfig fields whose prop has another name (lib/fleet-config-input.ts makes one from the
 * other): a pool's field, after "pools.<i>.". Durations become seconds, the image a parameter.
 */
const POOL_FIELDS: Readonly<Record<string, string>> = {
  idleTimeoutSeconds: 'idleTimeout',
  idleConfirmSeconds: 'idleConfirmation',
  maxJobSeconds: 'maxJobDuration',
  'warm.maxAgeSeconds': 'warm.maxAge',
  'warm.primingTimeoutSeconds': 'warm.primingTimeout',
  'warm.primeBackoffCapSeconds': 'warm.primeBackoffCap',
  'reuse.maxAgeSeconds': 'reuse.maxAge',
  imageParameter: 'machineImage',
  // The specific fields before their parent: the first prefix that matches wins.
  'scaleSet.name': 'scaleSetName',
  'scaleSet.runnerGroup': 'scaleSetRunnerGroup',
  scaleSet: 'scaleSetName',
};

/** Fleet-level FleetConfig fields whose prop has another name. */
const FLEET_FIELDS: Readonly<Record<string, string>> = {
  'metrics.namespace': 'metricNamespace',
  'parameters.kmsKeyId': 'encryptionKey',
  'gitlab.webhook.hookId': 'gitlab.webhookId',
  'gitlab.webhook.owner': 'gitlab.webhookId',
};

/** What the construct's props are for the translation: the pools' names, the GitLab connection. */
export interface PropPathSource {
  readonly pools: readonly { readonly name: string }[];
  readonly gitlab?: GitLabConnectionProps;
}

/**
 * The prop a FleetConfig field was made from, as the user wrote it: "pools.1.labels.0" is
 * `pools[1].labels[0]`, "pools.0.idleTimeoutSeconds" is `pools[0].idleTimeout`, and a pool's
 * subnets are the fleet's `vpcSubnets`.
 */
export function propPath(path: string, props: PropPathSource): string {
  const pool = /^pools\.(\d+)\.(.+)$/.exec(path);
  if (pool) {
    const [, index, field] = pool as unknown as [string, string, string];
    if (field === 'subnetIds' || field.startsWith('subnetIds.')) return 'vpcSubnets';
    const renamed = Object.entries(POOL_FIELDS).find(([from]) => field === from || field.startsWith(`${from}.`));
    const prop = renamed ? renamed[1] + field.slice(renamed[0].length) : field;
    return displayPath(`pools.${index}.${prop}`);
  }
  if (path === 'gitlab.webhook.ownerId') {
    // Its value came from the first of these the props set (gitLabReconcileConfig).
    const g = props.gitlab;
    return g?.webhookProjectId !== undefined ? 'gitlab.webhookProjectId' : g?.webhookGroupId !== undefined ? 'gitlab.webhookGroupId' : 'gitlab.scopeId';
  }
  const renamed = Object.entries(FLEET_FIELDS).find(([from]) => path === from || path.startsWith(`${from}.`));
  return displayPath(renamed ? renamed[1] + path.slice(renamed[0].length) : path);
}

/** `pools[1].labels[0] (pool "linux")`: the prop path, and the pool's name where it has one. */
export function propWhere(path: string, props: PropPathSource): string {
  const where = propPath(path, props);
  const index = /^pools\.(\d+)(\.|$)/.exec(path)?.[1];
  const name = index === undefined ? undefined : props.pools[Number(index)]?.name;
  // A problem of the name itself quotes the name.
  return where.startsWith('pools[') && name && !where.endsWith('].name') ? `${where} (pool "${name}")` : where;
}

/** One message for the FleetConfig's problems, each named by its prop. */
export function propProblemsMessage(problems: readonly ConfigProblem[], props: PropPathSource): string {
  return problems.map((p) => `${propWhere(p.path, props)} ${p.why}`).join('; ');
}

/** Where a pool's own prop is: `pools[0].diskSize (pool "linux")`. */
export function poolPropWhere(index: number, name: string, field: string): string {
  return `pools[${index}].${field} (pool "${name}")`;
}
