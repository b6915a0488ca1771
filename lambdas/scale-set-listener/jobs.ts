import { CreateTagsCommand, type EC2Client } from '@aws-sdk/client-ec2';
import { WRITE_IDEMPOTENT, type AwsCaller } from '../shared/aws-call';
import type { FleetConfig, PoolConfig, ScaleSetJobEvent, TagKeys } from '../shared/contract';
import { describeFleet, type ObservedInstance } from '../shared/instances';
import { activationTime, reportedStart } from '../shared/job-report';
import type { Logger } from '../shared/log';
import { scaleSetRunnerId } from '../ci/scale-set-runners';

export interface JobEventDeps {
  readonly aws: AwsCaller;
  readonly ec2: EC2Client;
  readonly config: FleetConfig;
  readonly keys: TagKeys;
  readonly now: () => Date;
  readonly log: Logger;
}

/** What a message's job events write, per tag: the instances each goes on. */
export interface JobMarks {
  /** `jobStarted`: the report the boot script writes itself; the idle rule never reclaims an instance that carries it. */
  readonly started: readonly string[];
  /** `idleSince`: the sweep's first reading that ends the instance, so one more reading a window later confirms. */
  readonly finished: readonly string[];
  /** Events whose runner no live instance of the pool carries (gone already, or not this fleet's). */
  readonly unmatched: readonly ScaleSetJobEvent[];
}

/**
 * What a message's job events mean for scale-down, pure. The instance is found by its
 * runner-id tag, not by the instance id in the runner's name: a registration carried from a
 * refused claim keeps its first candidate's id in its name (scale-up activate.ts `Carried`),
 * and the sweep matches runners to instances by the tag too.
 * - job-started: the instance's job report (`jobStarted`), unless it has one for this
 *   activation already (the boot script's own, or this event handled before).
 * - job-completed: the `idleSince` mark, the sweep's first reading of a finished runner
 *   (scale-down sweep.ts `unlistedReading`): the sweep still terminates only on its own
 *   reading that the runner is gone, a window later, so a late or repeated event ends
 *   nothing by itself, and a runner the sweep reads busy clears the mark.
 */
export function jobMarks(events: readonly ScaleSetJobEvent[], instances: readonly ObservedInstance[], runnerIdOf: (e: ScaleSetJobEvent) => string, keys: TagKeys, now: Date): JobMarks {
  const byRunner = new Map(instances.filter((i) => i.tags.has(keys.runnerId)).map((i) => [i.tags.get(keys.runnerId)!.toLowerCase(), i]));
  const started = new Set<string>();
  const finished = new Set<string>();
  const unmatched: ScaleSetJobEvent[] = [];
  for (const e of events) {
    const i = byRunner.get(runnerIdOf(e).toLowerCase());
    if (i === undefined) unmatched.push(e);
    else if (e.kind === 'started') {
      if (reportedStart(i, keys, activationTime(i, keys), now) === undefined) started.add(i.id);
    } else if (!i.tags.has(keys.idleSince)) finished.add(i.id);
  }
  return { started: [...started], finished: [...finished], unmatched };
}

/**
 * Marks the instances of a message's job events (`jobMarks`): one DescribeInstances by
 * runner-id tag, one CreateTags per tag. Throws when a read or a write fails: the message is
 * then not acknowledged, and its events are handled again from the next delivery.
 */
export async function markJobEvents(deps: JobEventDeps, pool: PoolConfig, events: readonly ScaleSetJobEvent[]): Promise<JobMarks> {
  const github = deps.config.github;
  if (!github) throw new Error('the fleet has no GitHub connection');
  const runnerIdOf = (e: ScaleSetJobEvent) => scaleSetRunnerId(github, pool, e.runnerId);
  const ids = [...new Set(events.map(runnerIdOf))];
  const instances = await describeFleet(deps.aws, deps.ec2, deps.keys, { pool: pool.name, tag: { key: deps.keys.runnerId, value: ids } });
  const now = deps.now();
  const marks = jobMarks(events, instances, runnerIdOf, deps.keys, now);
  const at = now.toISOString();
  if (marks.started.length > 0) await tag(deps, marks.started, deps.keys.jobStarted, at);
  if (marks.finished.length > 0) await tag(deps, marks.finished, deps.keys.idleSince, at);
  for (const e of marks.unmatched) deps.log.info('a job event names a runner no live instance of the pool carries', { kind: e.kind, runnerId: e.runnerId, runnerName: e.runnerName, jobId: e.jobId });
  return marks;
}

async function tag(deps: JobEventDeps, instanceIds: readonly string[], key: string, value: string): Promise<void> {
  await deps.aws.send(deps.ec2, new CreateTagsCommand({ Resources: [...instanceIds], Tags: [{ Key: key, Value: value }] }), WRITE_IDEMPOTENT);
}
