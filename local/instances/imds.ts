/**
 * A loopback IMDSv2 server playing one EC2 instance: the token, the identity document, role
 * credentials and instance metadata tags. The bats harness (test/support/boot-sandbox.ts)
 * drives its state by hand; the instance player (player.ts) runs one per played instance,
 * with the tags read live from moto.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { randomBytes } from 'node:crypto';

export interface ImdsState {
  instanceId: string;
  region: string;
  tags: Record<string, string>;
  /** InstanceMetadataTags of the launch template: when false every tag path answers 404. */
  tagsEnabled: boolean;
  /** When true every connection is dropped without an answer. */
  down: boolean;
  /** Number of requests still to drop without an answer (IMDS not up yet early in a boot). */
  dropNext: number;
  /** Paths (e.g. one tag's) whose requests are dropped without an answer, the others answered. */
  downPaths: string[];
  /** Milliseconds to wait before answering a role-credentials request (a metadata service slower than the aws CLI's 1 s default). */
  credentialsDelayMs: number;
  role: string;
  accessKeyId: string;
}

export interface LoggedRequest {
  /** Epoch milliseconds with fractions, comparable to `date +%s.%N`. */
  readonly t: number;
  readonly method: string;
  readonly path: string;
  readonly status: number;
}

export interface ImdsServerOptions {
  /**
   * The instance's tags now, asked on every tag request (the player reads them from moto, so
   * a tag written by scale-up shows at once). Without it, `state.tags` answers. A rejection
   * answers 500, which the boot script retries like any IMDS hiccup.
   */
  readonly liveTags?: () => Promise<Record<string, string>>;
  /** The clock tokens expire by (epoch ms). @default Date.now */
  readonly clock?: () => number;
}

type Answer = [status: number, body: string, type?: string, headers?: Record<string, string>];

const now = (): number => performance.timeOrigin + performance.now();

/** Listens on a free 127.0.0.1 port; resolves with the base URL. */
export function listenOnLoopback(server: Server): Promise<string> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve(`http://127.0.0.1:${(server.address() as AddressInfo).port}`));
  });
}

function send(res: ServerResponse, [status, body, type = 'text/plain', headers = {}]: Answer): void {
  res.writeHead(status, { ...headers, 'content-type': type, 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

const isoSeconds = (ms: number): string => new Date(ms).toISOString().replace(/\.\d+Z$/, 'Z');

export class ImdsServer {
  readonly log: LoggedRequest[] = [];
  readonly state: ImdsState = {
    instanceId: 'i-00000000000000000',
    region: 'us-east-1',
    tags: {},
    tagsEnabled: true,
    down: false,
    dropNext: 0,
    downPaths: [],
    credentialsDelayMs: 0,
    role: 'runner-instance-role',
    accessKeyId: 'ASIAIMDSSANDBOX00001',
  };
  /** Token → when it expires (epoch ms): a token is good for the TTL it was asked for. */
  private readonly tokens = new Map<string, number>();
  private readonly clock: () => number;
  private readonly server = createServer((req, res) => void this.handle(req, res));
  private readonly sockets = new Set<Socket>();

  constructor(private readonly options: ImdsServerOptions = {}) {
    this.clock = options.clock ?? Date.now;
    this.server.on('connection', (socket) => {
      this.sockets.add(socket);
      socket.on('close', () => this.sockets.delete(socket));
    });
  }

  listen(): Promise<string> {
    return listenOnLoopback(this.server);
  }

  close(): Promise<void> {
    for (const socket of this.sockets) socket.destroy();
    return new Promise((resolve) => this.server.close(() => resolve()));
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = (req.url ?? '/').split('?')[0] ?? '/';
    if (this.state.down || this.state.dropNext > 0 || this.state.downPaths.includes(path)) {
      if (this.state.dropNext > 0) this.state.dropNext -= 1;
      this.log.push({ t: now(), method: req.method ?? '', path, status: 0 });
      req.socket.destroy();
      return;
    }
    if (this.state.credentialsDelayMs > 0 && path.startsWith('/latest/meta-data/iam/security-credentials/')) {
      await new Promise((r) => setTimeout(r, this.state.credentialsDelayMs));
    }
    const answer = await this.answer(req, path).catch((error: unknown): Answer => [500, String(error)]);
    this.log.push({ t: now(), method: req.method ?? '', path, status: answer[0] });
    send(res, answer);
  }

  /** IMDSv2 only: a PUT for a token first, then GETs that carry it (EC2 user guide, "Use IMDSv2"). */
  private async answer(req: IncomingMessage, path: string): Promise<Answer> {
    const s = this.state;
    if (path === '/latest/api/token') {
      if (req.method !== 'PUT') return [405, 'Method Not Allowed'];
      const ttl = Number(req.headers['x-aws-ec2-metadata-token-ttl-seconds']);
      if (!Number.isInteger(ttl) || ttl < 1 || ttl > 21_600) return [400, 'Bad Request'];
      const token = randomBytes(24).toString('base64');
      const t = this.clock();
      for (const [old, expires] of this.tokens) if (expires <= t) this.tokens.delete(old);
      this.tokens.set(token, t + ttl * 1000);
      return [200, token, 'text/plain', { 'x-aws-ec2-metadata-token-ttl-seconds': String(ttl) }];
    }
    if (req.method !== 'GET') return [405, 'Method Not Allowed'];
    const token = req.headers['x-aws-ec2-metadata-token'];
    const expires = typeof token === 'string' ? this.tokens.get(token) : undefined;
    if (expires === undefined || expires <= this.clock()) return [401, 'Unauthorized'];
    const identity = JSON.stringify({
      accountId: '123456789012',
      architecture: 'x86_64',
      availabilityZone: `${s.region}a`,
      imageId: 'ami-12345678',
      instanceId: s.instanceId,
      instanceType: 't3.micro',
      privateIp: '10.0.0.10',
      region: s.region,
      version: '2017-09-30',
    }, null, 2);
    const credentialsPath = '/latest/meta-data/iam/security-credentials/';
    const tagsPath = '/latest/meta-data/tags/instance';
    const fixed: Record<string, string> = {
      '/latest/meta-data/instance-id': s.instanceId,
      '/latest/meta-data/placement/region': s.region,
      '/latest/meta-data/placement/availability-zone': `${s.region}a`,
      '/latest/dynamic/instance-identity/document': identity,
      [credentialsPath]: s.role,
      // moto accepts any credentials; the aws CLI needs some and takes them from here.
      [`${credentialsPath}${s.role}`]: JSON.stringify({
        Code: 'Success',
        LastUpdated: isoSeconds(Date.now()),
        Type: 'AWS-HMAC',
        AccessKeyId: s.accessKeyId,
        SecretAccessKey: 'imds-sandbox-secret-access-key',
        Token: 'imds-sandbox-session-token',
        Expiration: isoSeconds(Date.now() + 6 * 3600_000),
      }),
    };
    const value = fixed[path];
    if (value !== undefined) return [200, value];
    if (path !== tagsPath && !path.startsWith(`${tagsPath}/`)) return [404, 'Not Found'];
    if (!s.tagsEnabled) return [404, 'Not Found'];
    const tags = this.options.liveTags ? await this.options.liveTags() : s.tags;
    if (path === tagsPath) return [200, Object.keys(tags).join('\n')];
    const tag = tags[decodeURIComponent(path.slice(tagsPath.length + 1))];
    return tag === undefined ? [404, 'Not Found'] : [200, tag];
  }
}
