/**
 * The tags an instance carries on each launch path, from the functions the Lambdas send them
 * with (lambdas/shared/contract/instance-tags.ts), as the JSON object the sandbox's
 * `POST /instance` takes. For the bats harness (helpers.bash launch_tags), so a boot test
 * boots exactly what the pool and scale-up create, never a hand-written fixture.
 *
 *   node --import tsx test/templates/launch-tags.ts --prefix P --path cold|standby|activated \
 *     [--pool NAME] [--job-id ID] [--trace-id ID] [--runner-id ID] [--seconds-ago S] [--affinity A]
 *
 * `--affinity`: a reusable pool's job, whose affinity scale-up writes with the launch or the
 * activation (the instance role cannot write it).
 */
import { randomUUID } from 'node:crypto';
import { parseArgs } from 'node:util';
import { activationTags, coldLaunchTags, standbyLaunchTags, tagKeys, type InstanceTag } from '../../lambdas/shared/contract';

const { values } = parseArgs({
  options: {
    prefix: { type: 'string' },
    path: { type: 'string' },
    pool: { type: 'string', default: 'pool-a' },
    'job-id': { type: 'string', default: 'github:1:4242' },
    'trace-id': { type: 'string', default: 'trace-launch-tags' },
    'runner-id': { type: 'string', default: '77' },
    'seconds-ago': { type: 'string', default: '5' },
    affinity: { type: 'string' },
  },
  strict: true,
});
if (!values.prefix || !values.path) {
  console.error('usage: launch-tags.ts --prefix P --path cold|standby|activated [...]');
  process.exit(2);
}
const keys = tagKeys(values.prefix);
const job = { jobId: values['job-id'], traceId: values['trace-id'] };
// Each launch's ClientToken, as the Lambdas make one per launch.
const token = randomUUID();
const at = new Date(Date.now() - Number(values['seconds-ago']) * 1000);
const tags: Record<string, () => InstanceTag[]> = {
  /** scale-up's CreateFleet (lambdas/scale-up/cold.ts). */
  cold: () => coldLaunchTags(keys, values.pool, job, at, token, values.affinity),
  /** The pool's RunInstances (lambdas/pool/handler.ts). */
  standby: () => standbyLaunchTags(keys, values.pool, token),
  /** A standby after scale-up's activation CreateTags (lambdas/scale-up/claim.ts). */
  activated: () => [...standbyLaunchTags(keys, values.pool, token), ...activationTags(keys, job, values['runner-id'], at, values.affinity)],
};
const make = tags[values.path];
if (!make) {
  console.error(`--path must be one of ${Object.keys(tags).join(', ')}`);
  process.exit(2);
}
process.stdout.write(JSON.stringify(Object.fromEntries(make().map((t) => [t.Key, t.Value]))) + '\n');
