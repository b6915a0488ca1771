/**
 * Scale-up activation benchmark (`npm run bench:activation`).
 *
 * A burst of 100 jobs against 100 parked instances in moto, delivered as the event source
 * would with the construct's defaults (batches of 10, at most 5 concurrent invocations;
 * scaleUpBatchSize and scaleUpMaxConcurrency in lib/). Each invocation has its own
 * clients, like its own Lambda container, and an SDK middleware records every request by
 * action, lost-claim writes included. The handler paces its own calls (one shared Pacer:
 * the account's buckets): the documented EC2 limits and an SSM PutParameter bucket
 * (burst = rate) at 3 and at 10 writes per second, one run each, in real time. The recorded
 * requests are then replayed through the same buckets (bench/activation/model.ts) for the
 * modelled seconds. The same code with batching switched off (one StartInstances per job)
 * is the per-job baseline. Four runs, about three minutes.
 */
import { DescribeInstancesCommand } from '@aws-sdk/client-ec2';
import { createScaleUpHandler } from '../../lambdas/scale-up/handler';
import { AwsCaller } from '../../lambdas/shared/aws-call';
import { DEFAULT_RATES, Pacer, type BucketRate } from '../../lambdas/shared/pacing';
import { FakeCi } from '../../test/support/fake-ci';
import { INSTANCE_ARN_PREFIX, job, jobEvent, KEYS, PREFIX } from '../../test/support/fixtures';
import { startMoto, type MotoServer } from '../../test/support/moto';
import { motoClients, motoFleet, parkInMoto, type MotoClients } from '../../test/support/moto-fleet';
import { modelSeconds, type RecordedRequest } from './model';
import { Provider } from '../../lambdas/shared/contract';

const JOBS = 100;
const BATCH = 10;
const CONCURRENCY = 5;

interface RunResult {
  readonly requests: RecordedRequest[];
  readonly byAction: Record<string, number>;
  readonly warm: number;
  readonly cold: number;
  readonly lostClaims: number;
  readonly wallSeconds: number;
}

function recordingClients(endpoint: string, invocation: number, log: RecordedRequest[]): MotoClients {
  const c = motoClients(endpoint);
  type Next = (args: unknown) => Promise<unknown>;
  type Stack = { add(middleware: (next: Next, context: { commandName?: string }) => Next, options: object): void };
  for (const client of [c.ec2, c.ssm, c.sqs]) {
    (client.middlewareStack as unknown as Stack).add(
      (next, context) => async (args) => {
        const start = performance.now();
        try {
          return await next(args);
        } finally {
          log.push({ invocation, action: String(context.commandName).replace(/Command$/, ''), start, end: performance.now() });
        }
      },
      { step: 'finalizeRequest', name: 'countRequests' },
    );
  }
  return c;
}

async function burst(moto: MotoServer, batching: boolean, pacer?: Pacer): Promise<RunResult> {
  await moto.reset();
  const admin = motoClients(moto.endpoint);
  const config = await motoFleet(admin, { maxRunners: 200, warmSize: 100 });
  const parked = new Set(await parkInMoto(admin, config, JOBS));
  const ci = new FakeCi(Provider.GITHUB, PREFIX);
  const requests: RecordedRequest[] = [];
  const batches = Array.from({ length: JOBS / BATCH }, (_, b) => Array.from({ length: BATCH }, (_, k) => job(b * BATCH + k + 1)));
  let lostClaims = 0;
  let next = 0;
  let invocation = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (next < batches.length) {
        const batch = batches[next++]!;
        const id = invocation++;
        const handler = createScaleUpHandler({
          ...recordingClients(moto.endpoint, id, requests),
          aws: new AwsCaller(pacer ? { pacer } : {}),
          loadConfig: async () => config,
          providers: () => ({ github: ci }),
          queueUrl: 'unused',
          instanceArnPrefix: INSTANCE_ARN_PREFIX,
          deadLetterQueueUrl: 'unused',
          options: { batching },
          sink: (line) => {
            const m = /"LostClaims":(\d+)/.exec(line);
            if (m) lostClaims += Number(m[1]);
          },
        });
        const res = await handler(jobEvent(batch));
        if (res.batchItemFailures.length) throw new Error(`jobs failed: ${JSON.stringify(res.batchItemFailures)}`);
      }
    }),
  );
  const wallSeconds = (performance.now() - started) / 1000;
  const out = await admin.ec2.send(new DescribeInstancesCommand({ Filters: [{ Name: `tag-key`, Values: [KEYS.jobId] }, { Name: 'instance-state-name', Values: ['running'] }] }));
  const serving = (out.Reservations ?? []).flatMap((r) => r.Instances ?? []);
  const warm = serving.filter((i) => parked.has(i.InstanceId!)).length;
  const byAction: Record<string, number> = {};
  for (const r of requests) byAction[r.action] = (byAction[r.action] ?? 0) + 1;
  return { requests, byAction, warm, cold: serving.length - warm, lostClaims, wallSeconds };
}

function rates(ssmWrites: number): Record<string, BucketRate> {
  const write: BucketRate = { capacity: ssmWrites, refillPerSecond: ssmWrites };
  return { ...DEFAULT_RATES, PutParameter: write, DeleteParameter: write };
}

const FINISHING = new Set(['StartInstances', 'PutParameter']);
const round = (x: number, d = 2) => Math.round(x * 10 ** d) / 10 ** d;

async function main() {
  const moto = await startMoto();
  try {
    const results = new Map<string, RunResult>();
    for (const batching of [true, false]) {
      for (const ssm of [3, 10]) {
        // One pacer for all invocations: the account's buckets, which the model assumes every
        // caller paces itself to.
        const r = await burst(moto, batching, new Pacer(rates(ssm)));
        const name = `${batching ? 'batched' : 'per-job'}@${ssm}`;
        results.set(name, r);
        const total = r.requests.length;
        console.log(
          `${name}: warm=${r.warm} cold=${r.cold} lost-claims=${r.lostClaims} requests=${total} (${round(total / JOBS)} per job) ` +
            `modelled-seconds=${round(modelSeconds(r.requests, rates(ssm), FINISHING))} (SSM floor ${round(JOBS / ssm)}) wall-seconds-against-moto=${round(r.wallSeconds, 1)}`,
        );
        console.log(`  by action: ${Object.entries(r.byAction).sort().map(([a, n]) => `${a}=${n}`).join(' ')}`);
      }
    }
    const seconds = (name: string, ssm: number) => round(modelSeconds(results.get(name)!.requests, rates(ssm), FINISHING));
    console.log(
      [
        `requests-per-job=${round(results.get('batched@3')!.requests.length / JOBS)}`,
        `burst-seconds-at-3=${seconds('batched@3', 3)}`,
        `burst-seconds-at-10=${seconds('batched@10', 10)}`,
        `per-job-burst-seconds-at-3=${seconds('per-job@3', 3)}`,
        `per-job-burst-seconds-at-10=${seconds('per-job@10', 10)}`,
      ].join(' '),
    );
  } finally {
    await moto.stop();
  }
}

main().catch((error) => {
  console.error(error);
  process.exitCode = 1;
});
