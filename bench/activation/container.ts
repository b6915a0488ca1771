/**
 * One Lambda container of the activation benchmark (started by containers.ts with
 * `node --import tsx`, under a CPU limit or not): it runs scale-up invocations one at a
 * time, with its own SDK clients kept across invocations as a container keeps them, and
 * records every request by action (lost-claim writes included). Its pacer asks the parent,
 * which holds the account's buckets for all containers.
 */
import { createScaleUpHandler } from '../../lambdas/scale-up/handler';
import { AwsCaller } from '../../lambdas/shared/aws-call';
import type { RequestPacer } from '../../lambdas/shared/pacing';
import { FakeCi } from '../../test/support/fake-ci';
import { Provider } from '../../lambdas/shared/contract';
import { INSTANCE_ARN_PREFIX, job, PREFIX, record, sqsEvent } from '../../test/support/fixtures';
import { motoClients } from '../../test/support/moto-fleet';
import { calibrate } from '../calibrate';
import type { FromContainer, ToContainer } from './containers';
import type { RecordedRequest } from './model';

const endpoint = process.argv[2];
if (!endpoint || !process.send) throw new Error('container.ts runs as a child of bench/activation/containers.ts, given the moto endpoint');

// After the parent has gone (it failed), lanes still running have nobody to tell.
const send = (m: FromContainer) => void (process.connected && process.send!(m));
/** Absolute ms, comparable across the containers' processes. */
const clock = () => performance.timeOrigin + performance.now();

/**
 * BENCH_SLOW_AWS=1: every answer comes later, as from an EC2 and SSM much slower than usual:
 * 150 ms more, and 15 ms more per instance a DescribeInstances answers with (1.5 s for the
 * whole pool of 100: the time grows with the answer, as moto's and the SDK's work does).
 * Slow answers widen the same windows a slow handler does, and unlike the machine's load
 * they are the same in every run.
 */
function extraLatencyMs(output: unknown): number {
  if (process.env.BENCH_SLOW_AWS !== '1') return 0;
  const reservations = (output as { output?: { Reservations?: { Instances?: unknown[] }[] } } | undefined)?.output?.Reservations ?? [];
  return 150 + 15 * reservations.reduce((n, r) => n + (r.Instances?.length ?? 0), 0);
}

let requests: RecordedRequest[] = [];
let invocation = -1;
const clients = motoClients(endpoint);
type Next = (args: { input?: { Name?: string; Resources?: string[]; Filters?: { Name?: string }[] } }) => Promise<unknown>;
type Stack = { add(middleware: (next: Next, context: { commandName?: string }) => Next, options: object): void };
for (const client of [clients.ec2, clients.ssm, clients.sqs]) {
  (client.middlewareStack as unknown as Stack).add(
    (next, context) => async (args) => {
      const start = clock();
      const at = invocation;
      // What a request was about: the instance of a claim write or tag call; for a
      // DescribeInstances whether it asked for instances by id (a claim check) or the fleet.
      const byId = args.input?.Filters?.some((f) => f.Name === 'instance-id');
      const target = args.input?.Name?.split('/').pop() ?? args.input?.Resources?.[0] ?? (args.input?.Filters ? (byId ? 'by-id' : 'fleet') : undefined);
      const action = String(context.commandName).replace(/Command$/, '');
      let error: string | undefined;
      let out: unknown;
      try {
        out = await next(args);
        return out;
      } catch (e) {
        error = (e as Error).name;
        throw e;
      } finally {
        const extra = extraLatencyMs(out);
        if (extra > 0) await new Promise((r) => setTimeout(r, extra));
        requests.push({ invocation: at, action, start, end: clock(), ...(target ? { target } : {}), ...(error ? { error } : {}) });
      }
    },
    { step: 'finalizeRequest', name: 'countRequests' },
  );
}

let paced = new Set<string>();
let grantSerial = 0;
const grants = new Map<number, () => void>();
const pacer: RequestPacer = {
  take(action) {
    if (!paced.has(action)) return Promise.resolve();
    const id = ++grantSerial;
    return new Promise<void>((resolve) => {
      grants.set(id, resolve);
      send({ t: 'take', id, action });
    });
  },
};
const ci = new FakeCi(Provider.GITHUB, PREFIX);

async function invoke(m: Extract<ToContainer, { t: 'invoke' }>): Promise<void> {
  invocation = m.invocation;
  paced = new Set(m.paced);
  requests = [];
  let lostClaims = 0;
  const events: Record<string, number> = {};
  const cpu = process.cpuUsage();
  const started = performance.now();
  const handler = createScaleUpHandler({
    ...clients,
    aws: new AwsCaller({ pacer }),
    loadConfig: async () => m.config,
    providers: () => ({ github: ci }),
    queueUrl: 'unused',
    deadLetterQueueUrl: 'unused',
    instanceArnPrefix: INSTANCE_ARN_PREFIX,
    options: { batching: m.batching },
    sink: (line) => {
      const lost = /"LostClaims":(\d+)/.exec(line);
      if (lost) lostClaims += Number(lost[1]);
      // Why the activation took more than one claim: every line that is not the normal path.
      const m = /"level":"(?:warn|error)","message":"([^"]+)"/.exec(line) ?? /"level":"info","message":"(claim lost[^"]*)"/.exec(line);
      if (m) events[m[1]!] = (events[m[1]!] ?? 0) + 1;
    },
  });
  const res = await handler(sqsEvent(...m.jobs.map((n) => record(JSON.stringify(job(n)), { id: `msg-${n}`, receiveCount: m.receiveCount }))));
  const used = process.cpuUsage(cpu);
  send({
    t: 'invoked',
    invocation: m.invocation,
    requests,
    lostClaims,
    events,
    failures: res.batchItemFailures.map((f) => f.itemIdentifier),
    wallMs: performance.now() - started,
    cpuMs: (used.user + used.system) / 1000,
  });
}

process.on('message', (m: ToContainer) => {
  if (m.t === 'grant') {
    grants.get(m.id)?.();
    grants.delete(m.id);
  } else if (m.t === 'calibrate') {
    const { wallMs, cpuMs } = calibrate();
    send({ t: 'calibrated', wallMs, cpuMs });
  } else {
    invoke(m).catch((error: unknown) => {
      console.error(error);
      process.exit(1);
    });
  }
});
// The parent closing the channel is the end of this container.
process.on('disconnect', () => process.exit(0));
send({ t: 'ready' });
