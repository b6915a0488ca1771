import { DescribeInstancesCommand, type DescribeInstancesCommandOutput, type EC2Client, type Filter, type Instance } from '@aws-sdk/client-ec2';
import { READ, type AwsCaller } from './aws-call';
import { LAUNCH_TEMPLATE_VERSION_TAG, type TagKeys } from './contract';

/** One instance as the decision functions see it: only observed facts, no intentions. */
export interface ObservedInstance {
  readonly id: string;
  /** pending | running | stopping | stopped | shutting-down | terminated */
  readonly state: string;
  /** StateReason.Code, e.g. "Client.InstanceInitiatedShutdown"; undefined when EC2 gives none. */
  readonly stateReason?: string;
  /** EC2's LaunchTime: the last start (EC2 moves it on every start). */
  readonly launchTime: Date;
  readonly tags: ReadonlyMap<string, string>;
  readonly spotRequestId?: string;
  /** The AMI the instance was launched from. */
  readonly imageId?: string;
  /**
   * When the instance was first launched: the earliest of LaunchTime and the attach times of
   * its root volume and primary network interface, which EC2 keeps across stop and start
   * (LaunchTime it moves). Undefined when EC2 gave no attachment (then LaunchTime is all there is).
   */
  readonly firstLaunchTime?: Date;
}

export function observe(instance: Instance): ObservedInstance {
  return {
    id: instance.InstanceId ?? '',
    state: instance.State?.Name ?? 'unknown',
    ...(instance.StateReason?.Code ? { stateReason: instance.StateReason.Code } : {}),
    launchTime: instance.LaunchTime ?? new Date(0),
    tags: new Map((instance.Tags ?? []).filter((t) => t.Key !== undefined).map((t) => [t.Key!, t.Value ?? ''])),
    ...(instance.SpotInstanceRequestId ? { spotRequestId: instance.SpotInstanceRequestId } : {}),
    ...(instance.ImageId ? { imageId: instance.ImageId } : {}),
    ...firstLaunchOf(instance),
  };
}

function firstLaunchOf(instance: Instance): { firstLaunchTime?: Date } {
  const root = instance.BlockDeviceMappings?.find((b) => b.DeviceName !== undefined && b.DeviceName === instance.RootDeviceName)?.Ebs?.AttachTime;
  const eni = instance.NetworkInterfaces?.find((n) => n.Attachment?.DeviceIndex === 0)?.Attachment?.AttachTime;
  const times = [instance.LaunchTime, root, eni].filter((t): t is Date => t instanceof Date && !Number.isNaN(t.getTime()));
  if (root === undefined && eni === undefined) return {};
  return { firstLaunchTime: new Date(Math.min(...times.map((t) => t.getTime()))) };
}

export const LIVE_STATES = ['pending', 'running', 'stopping', 'stopped'];
/** Every state: an observation by id that must see a gone instance as gone. */
export const ALL_STATES = [...LIVE_STATES, 'shutting-down', 'terminated'];

/** Instances of the fleet (those carrying its pool tag), paginated, in the given states. */
export async function describeFleet(
  aws: AwsCaller,
  ec2: EC2Client,
  keys: TagKeys,
  options: {
    states?: readonly string[];
    pool?: string;
    instanceIds?: readonly string[];
    /** Instances whose tag `key` holds the value, or any of the values (one filter: EC2 joins its values with OR). */
    tag?: { readonly key: string; readonly value: string | readonly string[] };
    /** Only instances carrying any of these tag keys (with a pool: the pool filter is then a tag-key filter of its own). */
    anyTagKey?: readonly string[];
  } = {},
): Promise<ObservedInstance[]> {
  const filters: Filter[] = [
    options.pool === undefined ? { Name: 'tag-key', Values: [keys.pool] } : { Name: `tag:${keys.pool}`, Values: [options.pool] },
    { Name: 'instance-state-name', Values: [...(options.states ?? LIVE_STATES)] },
    ...(options.tag ? [{ Name: `tag:${options.tag.key}`, Values: typeof options.tag.value === 'string' ? [options.tag.value] : [...options.tag.value] }] : []),
    ...(options.anyTagKey && options.pool !== undefined ? [{ Name: 'tag-key', Values: [...options.anyTagKey] }] : []),
  ];
  const found: ObservedInstance[] = [];
  let token: string | undefined;
  do {
    const out = await aws.send<DescribeInstancesCommandOutput>(
      ec2,
      new DescribeInstancesCommand({
        // A filter, not InstanceIds: an id that no longer exists must not fail the whole call.
        Filters: options.instanceIds ? [...filters, { Name: 'instance-id', Values: [...options.instanceIds] }] : filters,
        MaxResults: 1000,
        ...(token ? { NextToken: token } : {}),
      }),
      READ,
    );
    for (const r of out.Reservations ?? []) for (const i of r.Instances ?? []) found.push(observe(i));
    token = out.NextToken;
  } while (token);
  return found;
}

export function templateVersionOf(instance: ObservedInstance): string | undefined {
  return instance.tags.get(LAUNCH_TEMPLATE_VERSION_TAG);
}

/** True once scale-up has activated the instance (warm) or launched it for a job (cold). */
export function isActivated(instance: ObservedInstance, keys: TagKeys): boolean {
  return instance.tags.has(keys.activatedAt) || instance.tags.has(keys.jobId);
}

/**
 * The GitHub repositories ("owner/repo", lower case) named by the fleet's instances: in a
 * repository runner's id (`owner/repo/<id>`, the runner-id tag) and in a reusable instance's
 * `affinity` (`github:owner/repo`). GitHub lists repository-level runners per repository
 * only, so the sweeps name these to `CiProvider.listRunners`: a reusable pool's runners are
 * registered at the job's repository also in an organisation fleet, and a runner missing from
 * the list reads as a finished job.
 */
export function repositoriesOf(instances: readonly ObservedInstance[], keys: TagKeys): string[] {
  const found = new Set<string>();
  for (const i of instances) {
    const runner = /^([\w.-]+\/[\w.-]+)\/\d+$/.exec(i.tags.get(keys.runnerId) ?? '');
    if (runner) found.add(runner[1]!.toLowerCase());
    const affinity = /^github:([\w.-]+\/[\w.-]+)$/.exec(i.tags.get(keys.affinity) ?? '');
    if (affinity) found.add(affinity[1]!.toLowerCase());
  }
  return [...found].sort();
}
