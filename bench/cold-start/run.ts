/**
 * Cold-start estimate of the four bundled functions (`npm run bench:cold-start`).
 *
 * An ESTIMATE, not a Lambda cold start: for each function and memory size, a fresh node
 * process held to the CPU share Lambda gives that memory size (bench/cpu-limit.ts: 1 vCPU
 * at 1769 MB, proportional below) loads the bundle from assets/ (module initialisation:
 * parsing the bundle, building its clients) and invokes its handler twice (the first
 * invocation, which fills the container's caches, and a second, warm one) against moto and
 * the loopback GitHub and GitLab of `npm run local`, provisioned as the CDK app would
 * (local/provision.ts). Left out: Lambda's own start (microVM, runtime bootstrap), the
 * network to the real services, and the difference between this machine's cores and
 * Lambda's (Graviton, arm64).
 *
 * Each function's configured memory size comes from lib/function-memory.ts; the sizes
 * around it are measured too, so the choice can be read off the table. A calibration loop
 * timed at each size (and unlimited) shows the share really obtained. BENCH_RUNS=n repeats
 * every cell n times (medians).
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { RunInstancesCommand, StopInstancesCommand } from '@aws-sdk/client-ec2';
import type { SQSEvent } from 'aws-lambda';
import { FUNCTION_MEMORY_MB } from '../../lib/function-memory';
import { BundledHandler } from '../../lib/bundled-function';
import { CREATED_BY, DEFAULT_PREFIX, LAMBDA_ENV, Provider, qualifiedJobId, tagKeys, WARM_STANDBY_VALUE } from '../../lambdas/shared/contract';
import { startLoopbackGitHub, type LoopbackGitHub } from '../../local/ci/github-server';
import { startLoopbackGitLab } from '../../local/ci/gitlab-server';
import { functionUrlEvent, githubWorkflowJobQueued } from '../../local/deliveries';
import { LOCAL_ACCOUNT, LOCAL_REGION, localClients, type LocalAwsClients } from '../../local/lambdas';
import { localExample, provision, type ProvisionedFleet } from '../../local/provision';
import { job, record, sqsEvent } from '../../test/support/fixtures';
import { motoEnv, startMoto } from '../../test/support/moto';
import { median, type Calibration } from '../calibrate';
import { createCpuLimit, vcpuShare, type CpuLimit } from '../cpu-limit';

const FUNCTIONS: readonly BundledHandler[] = [BundledHandler.WEBHOOK, BundledHandler.SCALE_UP, BundledHandler.POOL, BundledHandler.SCALE_DOWN];
const SIZES = [128, 256, 512, 1024, 1769];
const RUNS = Math.max(1, Number(process.env.BENCH_RUNS ?? 1));
const ROOT = join(__dirname, '..', '..');
const REPOSITORY = 'app';
const SILENCE_MS = 10 * 60_000;

interface Result {
  readonly nodeStartMs: number;
  readonly initMs: number;
  readonly initCpuMs: number;
  readonly invocations: { readonly ms: number; readonly cpuMs: number; readonly result: unknown }[];
  readonly rssMb: number;
}

/** Runs `args` with node, under `limit` when given, and waits for it; rejects on a non-zero exit. */
function runNode(args: readonly string[], env: NodeJS.ProcessEnv, limit: CpuLimit | undefined): Promise<string> {
  const options = { env, stdio: ['ignore', 'pipe', 'pipe'] as ('ignore' | 'pipe')[] };
  const child = limit ? limit.spawn(process.execPath, args, options) : spawn(process.execPath, args, options);
  let out = '';
  let err = '';
  child.stdout?.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr?.on('data', (d: Buffer) => (err = (err + d.toString()).slice(-4000)));
  return new Promise((resolve, reject) => {
    // A hang catcher: one estimate takes seconds, even at 128 MB's share.
    const silent = setTimeout(() => child.kill('SIGKILL'), SILENCE_MS);
    child.once('error', reject);
    child.once('exit', (code, signal) => {
      clearTimeout(silent);
      if (code === 0) resolve(out);
      else reject(new Error(`node ${args.join(' ')} exited ${code ?? signal}${signal === 'SIGKILL' ? ` (killed after ${SILENCE_MS / 1000} s)` : ''}: ${err}`));
    });
  });
}

/** The calibration loop in a fresh process, under a limit of `share` (unlimited when undefined). */
async function calibrateAt(share: number | undefined): Promise<Calibration & { readonly limit?: string }> {
  const limit = share === undefined ? undefined : createCpuLimit(share);
  try {
    const out = await runNode(['--import', 'tsx', join(__dirname, '..', 'calibrate-process.ts')], process.env, limit);
    const c = JSON.parse(out.trim().split('\n').pop()!) as Calibration;
    return { ...c, ...(limit ? { limit: `${limit.method} (${limit.setting})` } : {}) };
  } finally {
    await limit?.close();
  }
}

/** Two parked standbys of the fleet's first GitHub pool, as the pool Lambda leaves them (stopped). */
async function park(clients: LocalAwsClients, fleet: ProvisionedFleet): Promise<void> {
  const keys = tagKeys(fleet.config.prefix);
  const pool = fleet.config.pools.find((p) => p.provider === Provider.GITHUB)!;
  const tags = { [keys.pool]: pool.name, [keys.warmStandby]: WARM_STANDBY_VALUE, [keys.createdBy]: CREATED_BY.pool };
  const out = await clients.ec2.send(
    new RunInstancesCommand({
      MinCount: 2,
      MaxCount: 2,
      LaunchTemplate: { LaunchTemplateId: pool.launchTemplateId, Version: pool.launchTemplateVersion },
      SubnetId: fleet.subnetId,
      TagSpecifications: [{ ResourceType: 'instance', Tags: Object.entries(tags).map(([Key, Value]) => ({ Key, Value })) }],
    }),
  );
  await clients.ec2.send(new StopInstancesCommand({ InstanceIds: out.Instances!.map((i) => i.InstanceId!) }));
}

let serial = 0;

/** Two events of the kind the function gets: deliveries, queued jobs, schedule ticks. */
async function eventsFor(fn: BundledHandler, clients: LocalAwsClients, fleet: ProvisionedFleet, github: LoopbackGitHub): Promise<unknown[]> {
  const pool = fleet.config.pools.find((p) => p.provider === Provider.GITHUB)!;
  const org = fleet.config.github!.organization;
  const labels = ['self-hosted', ...pool.labels];
  switch (fn) {
    case BundledHandler.WEBHOOK:
      return [1, 2].map(() => {
        const j = github.addJob(`${org}/${REPOSITORY}`, labels);
        return functionUrlEvent(githubWorkflowJobQueued({ jobId: j.id, runId: j.runId, repository: j.repository, labels }, fleet.webhook.githubSecret));
      });
    case BundledHandler.SCALE_UP: {
      await park(clients, fleet);
      return [1, 2].map((): SQSEvent => {
        const j = github.addJob(`${org}/${REPOSITORY}`, labels);
        const n = ++serial;
        const message = job(n, {
          jobId: qualifiedJobId(Provider.GITHUB, String(j.id)),
          providerJobId: String(j.id),
          pool: pool.name,
          owner: org,
          project: REPOSITORY,
          labels,
          receivedAt: new Date().toISOString(),
        });
        return sqsEvent(record(JSON.stringify(message), { id: `msg-${n}`, attributes: {} }));
      });
    }
    case BundledHandler.POOL:
    case BundledHandler.SCALE_DOWN:
    case BundledHandler.RECONCILE:
      // EventBridge schedule events; the handlers do not read them.
      return [{ source: 'aws.events', 'detail-type': 'Scheduled Event' }, { source: 'aws.events', 'detail-type': 'Scheduled Event' }];
    case BundledHandler.DRAIN:
      throw new Error('the drain runs once, when the fleet is deleted: its cold start costs no job anything, so it is not measured');
    case BundledHandler.RUNNER_RELEASE:
      throw new Error('the release resolver runs hourly, off every job\'s path, and reads the providers\' release data: its cold start is not measured');
    case BundledHandler.SCALE_SET_LISTENER:
      throw new Error('the scale-set listener holds one long poll for minutes and starts cold once per lease hand-over, off every job\'s path: its cold start is not measured');
    case BundledHandler.SCALE_SET_RESOURCE:
      throw new Error('the scale-set resource runs only when the stack deploys or is deleted: its cold start is not measured');
  }
}

const round = (x: number, d = 0) => Math.round(x * 10 ** d) / 10 ** d;

async function main() {
  const moto = await startMoto();
  const example = localExample();
  const github = await startLoopbackGitHub({ organization: example.github.organization!, appId: example.github.appId });
  const gitlab = await startLoopbackGitLab({ groupId: example.gitlab.scopeId! });
  const sandbox = mkdtempSync(join(tmpdir(), 'cwr-cold-start-'));
  const clients = localClients(moto.endpoint);
  try {
    const free = await calibrateAt(undefined);
    console.log(`calibration loop unconstrained: ${round(free.wallMs)} ms (CPU share obtained ${round(free.cpuMs / free.wallMs, 2)})`);
    for (const mb of SIZES) {
      const c = await calibrateAt(vcpuShare(mb));
      console.log(
        `  ${mb} MB: share ${round(vcpuShare(mb), 3)} vCPU, loop ${round(c.wallMs)} ms = ${round(c.wallMs / free.wallMs, 1)}x, ` +
          `share obtained ${round(c.cpuMs / c.wallMs, 3)}, ${c.limit}`,
      );
    }
    console.log('function      MB*   vCPU  node-start  init(ms)  first(ms)  second(ms)  init-cpu  first-cpu  rss(MB)  first answer');
    for (const fn of FUNCTIONS) {
      for (const mb of SIZES) {
        const runs: Result[] = [];
        for (let r = 0; r < RUNS; r++) {
          await moto.reset();
          const fleet = await provision(clients, {
            prefix: DEFAULT_PREFIX,
            example,
            machine: { prefix: DEFAULT_PREFIX, awsEndpoint: moto.endpoint, sandboxRoot: sandbox },
            local: { poolSize: 2, githubApiUrl: github.url, gitlabUrl: gitlab.url },
            credentials: { githubAppPrivateKeyPem: github.privateKeyPem, gitlabAccessToken: gitlab.accessToken },
          });
          const eventsFile = join(sandbox, 'events.json');
          const resultFile = join(sandbox, 'result.json');
          writeFileSync(eventsFile, JSON.stringify(await eventsFor(fn, clients, fleet, github)));
          rmSync(resultFile, { force: true });
          const env = {
            PATH: process.env.PATH,
            HOME: process.env.HOME,
            ...motoEnv(moto.endpoint),
            AWS_REGION: LOCAL_REGION,
            [LAMBDA_ENV.fleetConfigParameter]: fleet.config.parameters.fleetConfig,
            [LAMBDA_ENV.jobsQueueUrl]: fleet.queueUrl,
            [LAMBDA_ENV.deadLetterQueueUrl]: fleet.deadLetterQueueUrl,
            [LAMBDA_ENV.instanceArnPrefix]: `arn:aws:ec2:${LOCAL_REGION}:${LOCAL_ACCOUNT}:instance/`,
            // The bench's moto has no record table: scale-up serves without records (JobRecordErrors).
            [LAMBDA_ENV.jobRecordTable]: 'bench-job-records',
          };
          const limit = createCpuLimit(vcpuShare(mb));
          try {
            await runNode([join(__dirname, 'invoke.mjs'), join(ROOT, 'assets', fn, 'index.js'), eventsFile, resultFile], env, limit);
          } finally {
            await limit.close();
          }
          runs.push(JSON.parse(readFileSync(resultFile, 'utf8')) as Result);
        }
        const m = (f: (r: Result) => number) => round(median(runs.map(f)));
        const mark = mb === FUNCTION_MEMORY_MB[fn] ? '*' : ' ';
        console.log(
          [
            fn.padEnd(12),
            `${mb}${mark}`.padStart(5),
            round(vcpuShare(mb), 3).toFixed(3).padStart(6),
            String(m((r) => r.nodeStartMs)).padStart(10),
            String(m((r) => r.initMs)).padStart(9),
            String(m((r) => r.invocations[0]!.ms)).padStart(10),
            String(m((r) => r.invocations[1]!.ms)).padStart(11),
            String(m((r) => r.initCpuMs)).padStart(9),
            String(m((r) => r.invocations[0]!.cpuMs)).padStart(10),
            String(m((r) => r.rssMb)).padStart(8),
            ` ${JSON.stringify(runs[0]!.invocations[0]!.result)}`,
          ].join(' '),
        );
      }
    }
    console.log('* the memory size lib/function-memory.ts configures. Times are medians of BENCH_RUNS runs; an estimate, not a Lambda cold start.');
  } finally {
    rmSync(sandbox, { recursive: true, force: true });
    await github.close();
    await gitlab.close();
    await moto.stop();
  }
}

main().catch((error) => {
  console.error(error);
  process.exitCode = 1;
});
