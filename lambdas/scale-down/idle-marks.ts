import { CreateTagsCommand, DeleteTagsCommand, type EC2Client } from '@aws-sdk/client-ec2';
import { errorName, WRITE_IDEMPOTENT, type AwsCaller } from '../shared/aws-call';
import type { TagKeys } from '../shared/contract';
import { describeFleet, type ObservedInstance } from '../shared/instances';
import type { Logger } from '../shared/log';

/** CreateTags and DeleteTags take many resources per call; 100 keeps a failed call's reach small. */
const CHUNK = 100;

/**
 * Records this sweep's idle readings on the instances (`planSweep`'s `markIdle` and
 * `clearIdle`): the first idle reading as the `idleSince` tag with the reading's time, a
 * working reading by removing it. Both are idempotent, so a lost answer is retried, and one
 * that still fails is left to the next sweep, which reads the tags again: a mark that was not
 * written only delays the idle rule by a sweep; a mark that was not cleared lets a later idle
 * reading count as the second one, which the deregistration still guards (GitHub refuses to
 * delete a busy runner) as does the instance's own job-started report.
 */
export async function recordIdleReadings(
  aws: AwsCaller,
  ec2: EC2Client,
  keys: TagKeys,
  plan: { readonly markIdle: readonly ObservedInstance[]; readonly clearIdle: readonly ObservedInstance[] },
  now: Date,
  log: Logger,
): Promise<void> {
  const calls: [string, readonly ObservedInstance[], (ids: string[]) => CreateTagsCommand | DeleteTagsCommand][] = [
    ['marking idle runners', plan.markIdle, (ids) => new CreateTagsCommand({ Resources: ids, Tags: [{ Key: keys.idleSince, Value: now.toISOString() }] })],
    ['clearing idle marks', plan.clearIdle, (ids) => new DeleteTagsCommand({ Resources: ids, Tags: [{ Key: keys.idleSince }] })],
  ];
  for (const [what, instances, command] of calls) {
    for (let i = 0; i < instances.length; i += CHUNK) {
      const ids = instances.slice(i, i + CHUNK).map((x) => x.id);
      try {
        await aws.send(ec2, command(ids), WRITE_IDEMPOTENT);
        log.info(what, { instanceIds: ids });
      } catch (error) {
        log.warn(`${what} failed; the next sweep reads the tags again`, { instances: ids.length, error: errorName(error) });
      }
    }
  }
}

/**
 * The instances among `idle` (planned for the idle rule) whose job-started report changed
 * since the sweep's first reading, read again just before their runners are deregistered: the
 * tags were read before the runner lists and the marks, and a job taken meanwhile would be
 * cut off by a DELETE that a wrong `busy: false` lets through. When the reading fails all are
 * kept: an unknown report is not "no report", and the next sweep reads them again.
 */
export async function reportedSinceReading(
  aws: AwsCaller,
  ec2: EC2Client,
  keys: TagKeys,
  idle: readonly ObservedInstance[],
  log: Logger,
): Promise<ReadonlySet<string>> {
  if (idle.length === 0) return new Set();
  try {
    const fresh = new Map((await describeFleet(aws, ec2, keys, { instanceIds: idle.map((i) => i.id) })).map((i) => [i.id, i]));
    return new Set(idle.filter((i) => fresh.get(i.id)?.tags.get(keys.jobStarted) !== i.tags.get(keys.jobStarted)).map((i) => i.id));
  } catch (error) {
    log.warn('reading job-started reports again failed; keeping the idle runners for the next sweep', { instances: idle.length, error: errorName(error) });
    return new Set(idle.map((i) => i.id));
  }
}
