import {
  CreateTagsCommand,
  DeleteTagsCommand,
  DescribeInstancesCommand,
  EC2Client,
  RunInstancesCommand,
  StopInstancesCommand,
  TerminateInstancesCommand,
  type Instance,
  type StartInstancesCommandOutput,
  type Tag,
} from '@aws-sdk/client-ec2';
import { DeleteParameterCommand, GetParameterCommand, GetParametersByPathCommand, SSMClient, type Parameter } from '@aws-sdk/client-ssm';
import type { SQSClient } from '@aws-sdk/client-sqs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPoolHandler } from '../../lambdas/pool/handler';
import { createScaleDownHandler } from '../../lambdas/scale-down/handler';
import { createScaleUpHandler } from '../../lambdas/scale-up/handler';
import { AwsCaller } from '../../lambdas/shared/aws-call';
import { affinityOf, decodeRunnerConfig, encodeParking, Provider, runnerName, ssmPaths, type FleetConfig } from '../../lambdas/shared/contract';
import { EVICTION_MARKER_PREFIX, IDLE_STOP_MARKER_PREFIX } from '../../lambdas/shared/parameters';
import { seededRandom } from '../../local/fault-plan';
import { FakeCi } from '../support/fake-ci';
import { INSTANCE_ARN_PREFIX, job, jobEvent, KEYS, PREFIX, standbyTags } from '../support/fixtures';
import { startMoto, type MotoServer } from '../support/moto';
import { motoClients, motoFleet, type MotoClients } from '../support/moto-fleet';
import { scaled } from '../support/slowdown';

/**
 * Reuse races against moto (issue 12; contract reuse.ts R2): on the same few instances, at
 * once, two scale-up invocations claim (the real handler and claim path), the pool evicts over
 * its target (the real handler and eviction lock), two overlapping sweeps idle-stop (the real
 * scale-down handler), and instances park themselves after their job or their deregistration
 * (the boot script's calls, in its order: CreateTags parking; CreateTags uses, warm-standby;
 * DeleteTags of the activation tags, the parking tag staying; StopInstances). The affinity is scale-up's
 * alone (it writes it with the activation): the simulated boot parks only when the instance's
 * affinity tag is its config's, as the boot script does. Jobs come from a few repositories
 * (affinities). A seed per
 * iteration draws the instances' starting states, each actor's start and every call's delay in
 * event-loop turns and short pauses (they shift who goes first; nothing is asserted about time).
 * A simulated clock moves on by a boot's duration when an instance boots, as EC2 would between
 * an observation and a late claim (scale-up verifies a claim that old: activate.ts).
 *
 * The test keeps the truth of each instance from the calls it sees answered (`Phase`) and
 * checks, as they happen: an instance is tagged for a job only while parked (no double claim,
 * no job given a cleaning, stopping or working instance), started only once tagged for one job,
 * its boot finds exactly its job's config (no claim overwritten by a marker or another claim)
 * with the job's affinity, equal to the instance's affinity tag and to the affinity of the caches
 * it parked with (R1: never another repository's), and neither the pool nor a sweep terminates
 * it while a job holds it. At the end of every
 * iteration no marker (eviction or idle-stop) is left.
 */
// 120 per run keeps npm test under 40 minutes (every race above still happened dozens of times
// in a run of 120: 29 evictions by the pool the fewest); more on demand with RACE_ITERATIONS.
const ITERATIONS = Number(process.env.RACE_ITERATIONS ?? 120);
const INSTANCES = 4;
const BOOT_MS = 30_000;
/** The repositories jobs come from: each its own affinity. */
const REPOSITORIES = [
  { owner: 'acme', project: 'app' },
  { owner: 'acme', project: 'lib' },
  { owner: 'other', project: 'app' },
];
const AFFINITIES = REPOSITORIES.map((r) => affinityOf({ provider: Provider.GITHUB, ...r }));
const paths = ssmPaths(PREFIX);

type Phase = { readonly is: 'parked' } | { readonly is: 'claimed' | 'active'; readonly job: string } | { readonly is: 'working-idle' | 'parking' | 'gone' };
type Actor = 'scale-up' | 'pool' | 'sweep' | 'instance';

let moto: MotoServer;
let c: MotoClients;
beforeAll(async () => {
  moto = await startMoto();
  c = motoClients(moto.endpoint);
});
afterAll(async () => moto?.stop());

/** A CI provider double that tells the test when a runner is deregistered (the runner then exits). */
class RaceCi extends FakeCi {
  onDeleted: (runnerId: string) => void = () => {};
  override async deleteRunner(runnerId: string): Promise<void> {
    const known = this.runners.has(runnerId);
    await super.deleteRunner(runnerId);
    if (known) this.onDeleted(runnerId);
  }
}

interface Iteration {
  readonly random: () => number;
  readonly phase: Map<string, Phase>;
  readonly violations: string[];
  readonly pending: Set<Promise<void>>;
  readonly ci: RaceCi;
  /** Instance by runner id: whose runner exits when it is deregistered. */
  readonly runnerOf: Map<string, string>;
  /** What happened, for the end's check that the races took place. */
  readonly counts: Record<string, number>;
  /** Instances that parked themselves in this iteration. */
  readonly reparked: Set<string>;
  /** The affinity of each job the scale-up invocations were sent. */
  readonly jobAffinity: Map<string, string>;
  /** What each instance recorded when it parked (its `$STATE/reuse`): the affinity of its caches and its uses. */
  readonly state: Map<string, { readonly affinity: string; readonly uses: number }>;
  /** The affinity of the config each working instance runs its job under (its boot parks only under it). */
  readonly configAffinity: Map<string, string>;
  clock: number;
}
const count = (it: Iteration, what: string, n = 1) => void (it.counts[what] = (it.counts[what] ?? 0) + n);

const turns = async (it: Iteration, max = 6) => {
  for (let n = Math.floor(it.random() * max); n > 0; n--) await new Promise((resolve) => setImmediate(resolve));
};
/**
 * A drawn pause of up to `maxMs` before an actor starts or an instance takes its next step: a
 * moto call takes milliseconds, so event-loop turns alone would barely move one actor past
 * another's call. It only shifts who goes first; nothing is asserted about time.
 */
const pause = (it: Iteration, maxMs: number) => new Promise<void>((resolve) => setTimeout(resolve, Math.floor(it.random() * maxMs)));

/**
 * Clients for one actor: every call waits a drawn number of turns before and after (and, for a
 * slow actor, a drawn pause of up to `slowMs`: a throttled or loaded Lambda), and its answer is
 * shown to `seen`.
 */
function actorClients(it: Iteration, actor: Actor, slowMs = 0): { ec2: EC2Client; ssm: SSMClient } {
  const common = { endpoint: moto.endpoint, region: 'us-east-1', credentials: { accessKeyId: 'testing', secretAccessKey: 'testing' }, maxAttempts: 1 };
  const ec2 = new EC2Client(common);
  const ssm = new SSMClient(common);
  for (const client of [ec2, ssm] as const) {
    (client.middlewareStack as EC2Client['middlewareStack']).add(
      (next, context) => async (args) => {
        await turns(it);
        if (slowMs > 0) await pause(it, slowMs);
        const out = await next(args);
        seen(it, actor, context.commandName as string, args.input as Record<string, unknown>, out.output as unknown as Record<string, unknown>);
        await turns(it);
        return out;
      },
      { step: 'initialize' },
    );
  }
  return { ec2, ssm };
}

const tagged = (input: Record<string, unknown>, key: string) => ((input.Tags ?? []) as Tag[]).some((t) => t.Key === key);
const jobOf = (input: Record<string, unknown>) => ((input.Tags ?? []) as Tag[]).find((t) => t.Key === KEYS.jobId)?.Value ?? '?';

/** The truth kept from the answered calls, and the invariants checked at each. */
function seen(it: Iteration, actor: Actor, command: string, input: Record<string, unknown>, output: Record<string, unknown>): void {
  const ids = ((input.Resources ?? input.InstanceIds ?? []) as string[]).filter((id) => it.phase.has(id));
  const flag = (id: string, what: string) => it.violations.push(`${what}: ${id} was ${JSON.stringify(it.phase.get(id))} (${actor} ${command})`);
  if (actor === 'scale-up' && command === 'CreateTagsCommand' && tagged(input, KEYS.activatedAt)) {
    const affinity = ((input.Tags ?? []) as Tag[]).find((t) => t.Key === KEYS.affinity)?.Value;
    for (const id of ids) {
      if (it.phase.get(id)!.is === 'gone') {
        // A claim from an observation older than a termination (the pool's eviction released
        // its lock): its start fails and it is rolled back; a terminated instance serves nothing.
        count(it, 'tagged for a job after its termination');
        continue;
      }
      if (it.phase.get(id)!.is !== 'parked') flag(id, `tagged for ${jobOf(input)} while not parked`);
      // R1: scale-up writes the job's affinity, and never onto caches of another.
      if (affinity === undefined || affinity !== it.jobAffinity.get(jobOf(input))) flag(id, `tagged for ${jobOf(input)} with affinity ${affinity}`);
      const cached = it.state.get(id)?.affinity;
      if (cached !== undefined && cached !== affinity) flag(id, `tagged for ${jobOf(input)} of ${affinity} onto caches of ${cached}`);
      count(it, 'tagged for a job');
      if (it.reparked.has(id)) count(it, 'tagged for a job after parking itself');
      it.phase.set(id, { is: 'claimed', job: jobOf(input) });
    }
  }
  if (actor === 'scale-up' && command === 'DeleteTagsCommand' && tagged(input, KEYS.activatedAt)) {
    // A rollback of a claim that was tagged and not started: parked again.
    for (const id of ids) if (it.phase.get(id)!.is === 'claimed') it.phase.set(id, { is: 'parked' });
  }
  if (actor === 'scale-up' && command === 'StartInstancesCommand') {
    for (const s of (output as unknown as StartInstancesCommandOutput).StartingInstances ?? []) {
      const id = s.InstanceId!;
      const p = it.phase.get(id);
      if (!p || s.PreviousState?.Name !== 'stopped') continue;
      if (p.is !== 'claimed') flag(id, 'started without one job claim');
      else {
        it.phase.set(id, { is: 'active', job: p.job });
        count(it, 'started for a job');
        spawn(it, boot(it, id, p.job));
      }
    }
  }
  if ((actor === 'pool' || actor === 'sweep') && command === 'TerminateInstancesCommand') {
    for (const id of ids) {
      const is = it.phase.get(id)!.is;
      if (is === 'claimed' || is === 'active') flag(id, 'terminated while a job holds it');
      if (is !== 'gone') count(it, `terminated by the ${actor}`);
      it.phase.set(id, { is: 'gone' });
    }
  }
}

function spawn(it: Iteration, work: Promise<void>): void {
  const p = work.catch((error: unknown) => {
    it.violations.push(`simulated instance failed: ${String(error)}`);
  });
  it.pending.add(p);
  void p.finally(() => it.pending.delete(p));
}

/**
 * The RUN boot of an instance started for `jobId`: the boot takes time (the clock moves on),
 * the config is read and must be this job's (R2: nothing overwrote the claim), deleted, the
 * job runs (job-started), its ephemeral runner is removed, and the instance parks.
 */
async function boot(it: Iteration, id: string, jobId: string): Promise<void> {
  const { ec2, ssm } = actorClients(it, 'instance');
  it.clock += BOOT_MS;
  let value: string | undefined;
  try {
    value = (await ssm.send(new GetParameterCommand({ Name: paths.runnerConfig(id), WithDecryption: true }))).Parameter?.Value;
  } catch (error) {
    if ((error as Error).name !== 'ParameterNotFound') throw error;
  }
  const tags = await tries(() => instanceTags(ec2, id));
  if (value === undefined || value.startsWith(EVICTION_MARKER_PREFIX) || value.startsWith(IDLE_STOP_MARKER_PREFIX)) {
    it.violations.push(`${id} booted for ${jobId} and found ${value === undefined ? 'no config' : 'a marker'}`);
    return;
  }
  const config = decodeRunnerConfig(value);
  if (config.provider !== Provider.GITHUB || config.jitConfig !== `jit-secret-${tags.get(KEYS.runnerId)}` || tags.get(KEYS.jobId) !== jobId) {
    it.violations.push(`${id} booted for ${jobId} with another job's config or tags (${tags.get(KEYS.jobId)})`);
    return;
  }
  // The boot's resume check (R1, R4): the config's affinity is the job's, the instance's tag
  // (scale-up's) and that of the caches it parked with; its uses are the ones it parked after.
  const affinity = config.reuse?.affinity;
  const state = it.state.get(id);
  if (affinity === undefined || affinity !== it.jobAffinity.get(jobId) || affinity !== tags.get(KEYS.affinity) || (state !== undefined && state.affinity !== affinity)) {
    it.violations.push(`${id} booted for ${jobId} with affinity ${affinity}: job's ${it.jobAffinity.get(jobId)}, tag ${tags.get(KEYS.affinity)}, caches ${state?.affinity}`);
    return;
  }
  if (config.reuse!.uses !== (state?.uses ?? 0)) {
    it.violations.push(`${id} booted for ${jobId} with ${config.reuse!.uses} uses, parked after ${state?.uses ?? 0}`);
    return;
  }
  if (state !== undefined) count(it, 'booted onto caches of its affinity');
  it.configAffinity.set(id, affinity);
  await tries(() => ssm.send(new DeleteParameterCommand({ Name: paths.runnerConfig(id) })));
  await tries(() => ec2.send(new CreateTagsCommand({ Resources: [id], Tags: [{ Key: KEYS.jobStarted, Value: new Date(it.clock).toISOString() }] })));
  await pause(it, 30);
  it.ci.runners.delete(tags.get(KEYS.runnerId)!);
  await park(it, id, ec2);
}

/** A call retried a few times, as the boot script's `aws_try` does (moto under load answers a 500 now and then). */
async function tries<T>(call: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await call();
    } catch (error) {
      if (attempt >= 3) throw error;
    }
  }
}

/**
 * The boot script's park after its runner ended, in its order (design item 4); the cleaning
 * itself is not modelled. It never writes the affinity: it parks only when the instance's tag
 * (scale-up's) is its config's, and terminates otherwise.
 */
async function park(it: Iteration, id: string, ec2: EC2Client): Promise<void> {
  if (it.phase.get(id)!.is === 'gone') return;
  it.phase.set(id, { is: 'parking' });
  const affinity = it.configAffinity.get(id);
  let uses = 0;
  try {
    const tags = await tries(() => instanceTags(ec2, id));
    if (affinity === undefined || tags.get(KEYS.affinity) !== affinity) {
      count(it, 'not parked: affinity tag not the config\'s');
      throw new Error('affinity tag not the config\'s');
    }
    uses = Number(tags.get(KEYS.uses) ?? '0') + 1;
    await tries(() => ec2.send(new CreateTagsCommand({ Resources: [id], Tags: [{ Key: KEYS.parking, Value: encodeParking(tags.get(KEYS.activatedAt) ?? '', new Date(it.clock)) }] })));
    await pause(it, 20);
    // Its $STATE/reuse, written before the tags (a step that fails terminates the instance).
    it.state.set(id, { affinity, uses });
    const parked = [{ Key: KEYS.uses, Value: String(uses) }, { Key: KEYS.warmStandby, Value: standbyTags()[KEYS.warmStandby]! }];
    await tries(() => ec2.send(new CreateTagsCommand({ Resources: [id], Tags: parked })));
    const activation = [KEYS.activatedAt, KEYS.traceId, KEYS.jobId, KEYS.runnerId, KEYS.jobStarted, KEYS.idleSince];
    await tries(() => ec2.send(new DeleteTagsCommand({ Resources: [id], Tags: activation.map((Key) => ({ Key })) })));
    await pause(it, 20);
    await tries(() => ec2.send(new StopInstancesCommand({ InstanceIds: [id] })));
  } catch {
    // Evicted meanwhile (a parking instance looks like a priming standby), or a step failed:
    // the boot script terminates the instance instead of parking it (R5).
    await c.ec2.send(new TerminateInstancesCommand({ InstanceIds: [id] })).catch(() => undefined);
    it.phase.set(id, { is: 'gone' });
    return;
  }
  if (it.phase.get(id)!.is === 'parking') it.phase.set(id, { is: 'parked' });
  count(it, 'parked itself');
  it.reparked.add(id);
}

async function instanceTags(ec2: EC2Client, id: string): Promise<Map<string, string>> {
  const out = await ec2.send(new DescribeInstancesCommand({ InstanceIds: [id] }));
  const i: Instance | undefined = out.Reservations?.[0]?.Instances?.[0];
  return new Map((i?.Tags ?? []).map((t) => [t.Key!, t.Value!]));
}

/**
 * The starting instances, each drawn: parked fresh, parked with an affinity (a reused one),
 * activated and idle past the idle timeout (read idle a window ago: an idle-stop candidate), or
 * activated with its job just finished (it parks itself at a drawn moment).
 */
async function setUp(it: Iteration, config: FleetConfig): Promise<{ finishing: string[] }> {
  const pool = config.pools[0]!;
  const out = await c.ec2.send(
    new RunInstancesCommand({
      MinCount: INSTANCES,
      MaxCount: INSTANCES,
      LaunchTemplate: { LaunchTemplateId: pool.launchTemplateId, Version: pool.launchTemplateVersion },
      SubnetId: pool.subnetIds[0],
      TagSpecifications: [{ ResourceType: 'instance', Tags: Object.entries(standbyTags()).filter(([k]) => !k.startsWith('aws:')).map(([Key, Value]) => ({ Key, Value })) }],
    }),
  );
  const ids = out.Instances!.map((i) => i.InstanceId!);
  const toStop: string[] = [];
  const finishing: string[] = [];
  const at = (ms: number) => new Date(it.clock - ms).toISOString();
  for (const [n, id] of ids.entries()) {
    const kind = Math.floor(it.random() * 4);
    const affinity = AFFINITIES[Math.floor(it.random() * AFFINITIES.length)]!;
    if (kind <= 1) {
      toStop.push(id);
      it.phase.set(id, { is: 'parked' });
      if (kind === 1) {
        // Parked after a job: the affinity its activation wrote, the uses and the state it parked with.
        await c.ec2.send(new CreateTagsCommand({ Resources: [id], Tags: [{ Key: KEYS.affinity, Value: affinity }, { Key: KEYS.uses, Value: '1' }] }));
        it.state.set(id, { affinity, uses: 1 });
      }
      continue;
    }
    const runnerId = `r-${n}`;
    // Activated by scale-up for a job of `affinity` (its first: no reuse state yet).
    const activation: Tag[] = [
      { Key: KEYS.activatedAt, Value: at(3_600_000) },
      { Key: KEYS.jobId, Value: `github:old-${n}` },
      { Key: KEYS.runnerId, Value: runnerId },
      { Key: KEYS.traceId, Value: `t-${n}` },
      { Key: KEYS.affinity, Value: affinity },
    ];
    it.configAffinity.set(id, affinity);
    if (kind === 2) {
      // Idle since its activation, read idle by an earlier sweep past the confirmation window.
      await c.ec2.send(new CreateTagsCommand({ Resources: [id], Tags: [...activation, { Key: KEYS.idleSince, Value: at(3 * 60_000) }] }));
      it.ci.runners.set(runnerId, { runnerId, name: runnerName(PREFIX, id, new Date(it.clock - 3_600_000)), status: 'online', busy: false, instanceId: id, jobId: 'x' });
      it.runnerOf.set(runnerId, id);
      it.phase.set(id, { is: 'working-idle' });
    } else {
      // Its job ran and ended (reported, runner gone): it is about to clean and park.
      await c.ec2.send(new CreateTagsCommand({ Resources: [id], Tags: [...activation, { Key: KEYS.jobStarted, Value: at(60_000) }] }));
      it.phase.set(id, { is: 'working-idle' });
      finishing.push(id);
    }
  }
  if (toStop.length) await c.ec2.send(new StopInstancesCommand({ InstanceIds: toStop }));
  return { finishing };
}

async function markersLeft(): Promise<Parameter[]> {
  const all: Parameter[] = [];
  let token: string | undefined;
  do {
    const out = await c.ssm.send(new GetParametersByPathCommand({ Path: paths.runnerConfigRoot, WithDecryption: false, ...(token ? { NextToken: token } : {}) }));
    all.push(...(out.Parameters ?? []));
    token = out.NextToken;
  } while (token);
  return all.filter((p) => p.Type === 'String' && (p.Value?.startsWith(EVICTION_MARKER_PREFIX) || p.Value?.startsWith(IDLE_STOP_MARKER_PREFIX)));
}

/** One iteration: set up, every actor at once, wait for the instances to settle, check. */
async function iteration(seed: number, counts: Record<string, number>): Promise<string[]> {
  await moto.reset();
  const base = await motoFleet(c, { idleTimeoutSeconds: 1800, reuse: { maxJobs: 5, cacheDirectories: ['/var/cache/ci'] } });
  const it: Iteration = { random: seededRandom(seed), phase: new Map(), violations: [], pending: new Set(), ci: new RaceCi(Provider.GITHUB, PREFIX), runnerOf: new Map(), counts, reparked: new Set(), jobAffinity: new Map(), state: new Map(), configAffinity: new Map(), clock: Date.now() };
  const warmSize = Math.floor(it.random() * 3);
  const config: FleetConfig = { ...base, pools: [{ ...base.pools[0]!, warm: { ...base.pools[0]!.warm, size: warmSize } }] };
  const { finishing } = await setUp(it, config);
  it.ci.onDeleted = (runnerId) => {
    const id = it.runnerOf.get(runnerId);
    // The deregistered runner exits; its instance cleans and parks.
    if (id && it.phase.get(id)?.is === 'working-idle') spawn(it, pause(it, 20).then(() => park(it, id, actorClients(it, 'instance').ec2)));
  };
  const now = () => new Date(it.clock);
  const aws = () => new AwsCaller({ sleep: async () => {}, timeoutMs: scaled(10_000) });
  const sqs = { send: async () => ({}) } as unknown as SQSClient;
  const quiet = () => {};
  const jobsOf = (n: number) =>
    Array.from({ length: 1 + Math.floor(it.random() * 2) }, (_, k) => {
      const r = REPOSITORIES[Math.floor(it.random() * REPOSITORIES.length)]!;
      const j = job(seed * 10 + n * 3 + k, { receivedAt: now().toISOString(), ...r });
      it.jobAffinity.set(j.jobId, affinityOf(j));
      return j;
    });
  const scaleUp = (n: number) =>
    createScaleUpHandler({
      ...actorClients(it, 'scale-up'),
      sqs,
      aws: aws(),
      loadConfig: async () => config,
      providers: () => ({ github: it.ci }),
      queueUrl: 'q',
      deadLetterQueueUrl: 'dlq',
      instanceArnPrefix: INSTANCE_ARN_PREFIX,
      random: it.random,
      now,
      sink: quiet,
    })(jobEvent(jobsOf(n)));
  const pool = () => createPoolHandler({ ...actorClients(it, 'pool'), aws: aws(), loadConfig: async () => config, now, sink: quiet })();
  // One of the two sweeps is slow: it acts on its reading long after the other has acted on its own.
  const sweep = (slowMs: number) => () => createScaleDownHandler({ ...actorClients(it, 'sweep', slowMs), aws: aws(), loadConfig: async () => config, providers: () => ({ github: it.ci }), now, sink: quiet })();
  const later = <T>(run: () => Promise<T>, maxMs = 60) => pause(it, maxMs).then(run);
  const results = await Promise.all([
    later(() => scaleUp(0)),
    later(() => scaleUp(1)),
    later(pool),
    later(sweep(0)),
    later(sweep(80)),
    // A later wave: claims on instances that parked again meanwhile.
    later(() => scaleUp(2), 400),
    ...finishing.map((id) => later(() => park(it, id, actorClients(it, 'instance').ec2))),
  ]);
  while (it.pending.size > 0) await Promise.all([...it.pending]);
  count(it, 'idle-stopped', results.slice(3, 5).reduce((n, r) => n + (r as { idleStopped: number }).idleStopped, 0));
  const left = await markersLeft();
  return [...it.violations, ...left.map((p) => `marker left at ${p.Name}: ${p.Value}`)];
}

describe('reuse races against moto: claims, evictions, idle-stops and parks on the same instances', () => {
  it(`${ITERATIONS} seeded iterations: no double claim, no job given a cleaning or stopping instance, no claim overwritten, no marker left`, async () => {
    const counts: Record<string, number> = {};
    const violations: string[] = [];
    for (let seed = 1; seed <= ITERATIONS; seed++) {
      for (const v of await iteration(seed, counts)) violations.push(`seed ${seed}: ${v}`);
    }
    console.log('reuse race: what happened over all iterations', counts);
    expect(violations).toEqual([]);
    // The races took place: instances were idle-stopped, parked themselves, were claimed, started and evicted.
    for (const what of ['idle-stopped', 'parked itself', 'tagged for a job', 'started for a job', 'tagged for a job after parking itself', 'booted onto caches of its affinity', 'terminated by the pool']) expect(counts[what] ?? 0, what).toBeGreaterThan(0);
  }, scaled(1_800_000));
});
