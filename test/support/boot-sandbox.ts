/**
 * The EC2 side of the boot-script sandbox, for the bats harness (test/templates/) and the
 * boot benchmark (bench/boot/): a moto server, a loopback IMDSv2 server playing one
 * instance, an AWS proxy in front of moto that counts calls and injects throttling, and a
 * control API the tests drive. Run with `node --import tsx`; it prints one JSON line with
 * the endpoints, then serves until SIGTERM, SIGINT or its parent's exit (untilStopped), and
 * stops moto on the way out.
 *
 * Everything listens on free 127.0.0.1 ports.
 */
import { createServer, request, type IncomingMessage, type ServerResponse } from 'node:http';
import { randomUUID } from 'node:crypto';
import { CreateTagsCommand, DescribeImagesCommand, DescribeInstancesCommand, EC2Client, RunInstancesCommand } from '@aws-sdk/client-ec2';
import { DeleteParameterCommand, GetParameterCommand, PutParameterCommand, SSMClient } from '@aws-sdk/client-ssm';
import { encodeRunnerConfig, ssmPaths, type RunnerConfig } from '../../lambdas/shared/contract';
import { startMoto, type MotoServer } from './moto';
import { ImdsServer, listenOnLoopback as listen } from '../../local/instances/imds';
import { untilStopped } from '../../local/until-stopped';

export interface LoggedAwsCall {
  readonly t: number;
  /** "AmazonSSM.GetParameter" for JSON protocols, "EC2.TerminateInstances" for EC2's query protocol. */
  readonly action: string;
  /** The access key id the caller signed with. */
  readonly accessKeyId: string;
  readonly status: number;
}

const now = (): number => performance.timeOrigin + performance.now();

async function readBody(req: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

function send(res: ServerResponse, status: number, body: string, type = 'text/plain'): void {
  res.writeHead(status, { 'content-type': type, 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

/**
 * Forwards to moto; counts every AWS call, answers with an error (ThrottlingException unless
 * told another) while told to, and can accept a call and never answer it.
 */
export class AwsProxy {
  readonly log: LoggedAwsCall[] = [];
  /** Action -> number of calls still to refuse, and the error code to refuse them with. */
  readonly throttle = new Map<string, { count: number; error: string }>();
  /**
   * Action -> number of calls still to accept and leave unanswered (status -1 in the log),
   * after letting `after` more of them through.
   */
  readonly hang = new Map<string, { after: number; count: number }>();
  /** Number of requests still to drop without an answer, as a network that is not up. */
  drop = 0;
  private readonly server = createServer((req, res) => void this.handle(req, res));

  constructor(private readonly upstream: string) {}

  listen(): Promise<string> {
    return listen(this.server);
  }

  close(): Promise<void> {
    this.server.closeAllConnections();
    return new Promise((resolve) => this.server.close(() => resolve()));
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    if (this.drop > 0) {
      this.drop -= 1;
      this.log.push({ t: now(), action: 'dropped', accessKeyId: '', status: 0 });
      req.socket.destroy();
      return;
    }
    const body = await readBody(req);
    const target = req.headers['x-amz-target'];
    const action =
      typeof target === 'string' ? target : `EC2.${new URLSearchParams(body.toString()).get('Action') ?? 'unknown'}`;
    const accessKeyId = /Credential=([^/,\s]+)/.exec(String(req.headers.authorization ?? ''))?.[1] ?? '';
    const hang = this.hang.get(action);
    if (hang && hang.after > 0) hang.after -= 1;
    else if (hang && hang.count > 0) {
      // The connection stays open without a byte of answer, as behind a black-holing route.
      hang.count -= 1;
      this.log.push({ t: now(), action, accessKeyId, status: -1 });
      return;
    }
    const fault = this.throttle.get(action);
    if (fault && fault.count > 0) {
      fault.count -= 1;
      this.log.push({ t: now(), action, accessKeyId, status: 400 });
      const message = fault.error === 'ThrottlingException' ? 'Rate exceeded' : `User is not authorized to perform: ${action}`;
      send(res, 400, JSON.stringify({ __type: fault.error, message }), 'application/x-amz-json-1.1');
      return;
    }
    const url = new URL(req.url ?? '/', this.upstream);
    const upstream = request(url, { method: req.method, headers: { ...req.headers, host: url.host } }, (up) => {
      this.log.push({ t: now(), action, accessKeyId, status: up.statusCode ?? 0 });
      res.writeHead(up.statusCode ?? 502, up.headers);
      up.pipe(res);
    });
    upstream.on('error', (error) => send(res, 502, String(error)));
    upstream.end(body);
  }
}

export interface BootSandbox {
  readonly imdsUrl: string;
  readonly awsUrl: string;
  readonly controlUrl: string;
  readonly moto: MotoServer;
  stop(): Promise<void>;
}

/** Starts moto, the IMDS server, the proxy and the control API. */
export async function startBootSandbox(): Promise<BootSandbox> {
  const moto = await startMoto();
  const imds = new ImdsServer();
  const proxy = new AwsProxy(moto.endpoint);
  const clientConfig = {
    endpoint: moto.endpoint,
    region: 'us-east-1',
    credentials: { accessKeyId: 'testing', secretAccessKey: 'testing' },
  };
  const ec2 = new EC2Client(clientConfig);
  const ssm = new SSMClient(clientConfig);
  let imageId: string | undefined;

  const control = createServer((req, res) => {
    void (async () => {
      const url = new URL(req.url ?? '/', 'http://control');
      const body = await readBody(req);
      const input = body.length > 0 ? (JSON.parse(body.toString()) as Record<string, unknown>) : {};
      const json = (value: unknown): void => send(res, 200, JSON.stringify(value), 'application/json');
      switch (`${req.method} ${url.pathname}`) {
        case 'POST /instance': {
          // A real instance in moto, so terminate-instances and its state are real.
          imageId ??= (await ec2.send(new DescribeImagesCommand({ Owners: ['amazon'] }))).Images?.[0]?.ImageId;
          const run = await ec2.send(new RunInstancesCommand({ ImageId: imageId, MinCount: 1, MaxCount: 1, InstanceType: 't3.micro' }));
          const instanceId = run.Instances?.[0]?.InstanceId;
          if (!instanceId) throw new Error('moto returned no instance');
          const tags = (input.tags ?? {}) as Record<string, string>;
          if (Object.keys(tags).length > 0) {
            await ec2.send(new CreateTagsCommand({ Resources: [instanceId], Tags: Object.entries(tags).map(([Key, Value]) => ({ Key, Value })) }));
          }
          Object.assign(imds.state, { instanceId, tags, tagsEnabled: input.tagsEnabled ?? true, down: false, dropNext: 0, downPaths: [], credentialsDelayMs: 0 });
          return json({ instanceId, region: imds.state.region });
        }
        case 'POST /imds':
          Object.assign(imds.state, input);
          return json(imds.state);
        case 'GET /instance': {
          const id = url.searchParams.get('id') ?? imds.state.instanceId;
          const out = await ec2.send(new DescribeInstancesCommand({ InstanceIds: [id] }));
          return json({ state: out.Reservations?.[0]?.Instances?.[0]?.State?.Name ?? 'unknown' });
        }
        case 'POST /runner-config': {
          // Written the way scale-up writes it: the contract's encoding and parameter name.
          // The config names its instance: by default the one it is written for, or another
          // one (`for`) to play a config written under the wrong name.
          const instanceId = String(input.instanceId ?? imds.state.instanceId);
          const name = ssmPaths(String(input.prefix)).runnerConfig(instanceId);
          const value = encodeRunnerConfig({ ...(input.config as RunnerConfig), instanceId: String(input.for ?? instanceId) });
          await ssm.send(new PutParameterCommand({ Name: name, Value: value, Type: 'SecureString', Overwrite: true }));
          return json({ name });
        }
        case 'POST /param':
          await ssm.send(new PutParameterCommand({ Name: String(input.name), Value: String(input.value), Type: 'SecureString', Overwrite: true }));
          return json({ ok: true });
        case 'DELETE /param':
          await ssm.send(new DeleteParameterCommand({ Name: url.searchParams.get('name') ?? '' })).catch(() => undefined);
          return json({ ok: true });
        case 'GET /param': {
          try {
            const out = await ssm.send(new GetParameterCommand({ Name: url.searchParams.get('name') ?? '', WithDecryption: true }));
            return json({ exists: true, value: out.Parameter?.Value });
          } catch (error) {
            if ((error as Error).name === 'ParameterNotFound') return json({ exists: false });
            throw error;
          }
        }
        case 'POST /throttle':
          proxy.throttle.set(String(input.action), { count: Number(input.count), error: String(input.error ?? 'ThrottlingException') });
          return json({ ok: true });
        case 'POST /hang':
          proxy.hang.set(String(input.action), { after: Number(input.after ?? 0), count: Number(input.count) });
          return json({ ok: true });
        case 'POST /drop':
          proxy.drop = Number(input.count);
          return json({ ok: true });
        case 'GET /log':
          return json({ imds: imds.log, aws: proxy.log });
        case 'POST /log/reset':
          imds.log.length = 0;
          proxy.log.length = 0;
          proxy.throttle.clear();
          proxy.hang.clear();
          proxy.drop = 0;
          return json({ ok: true });
        default:
          return send(res, 404, `no control route ${req.method} ${url.pathname}`);
      }
    })().catch((error: unknown) => send(res, 500, String(error)));
  });

  const [imdsUrl, awsUrl, controlUrl] = await Promise.all([imds.listen(), proxy.listen(), listen(control)]);
  return {
    imdsUrl,
    awsUrl,
    controlUrl,
    moto,
    async stop() {
      control.closeAllConnections();
      await Promise.all([imds.close(), proxy.close(), new Promise<void>((r) => control.close(() => r())), moto.stop()]);
      ec2.destroy();
      ssm.destroy();
    },
  };
}

if (require.main === module) {
  void (async () => {
    const sandbox = await startBootSandbox();
    untilStopped(() => sandbox.stop());
    process.stdout.write(
      `${JSON.stringify({ imds: sandbox.imdsUrl, aws: sandbox.awsUrl, control: sandbox.controlUrl, moto: sandbox.moto.endpoint, id: randomUUID() })}\n`,
    );
  })().catch((error: unknown) => {
    console.error(error);
    process.exit(1);
  });
}
