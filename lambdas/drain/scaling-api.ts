import { createHash, createHmac } from 'node:crypto';
import { SignatureV4 } from '@smithy/signature-v4';
import type { AwsCredentialIdentityProvider, Checksum, SourceData } from '@smithy/types';

/**
 * The four Lambda and EventBridge calls the drain makes to stop scaling, signed with SigV4 and
 * sent with fetch. The project carries no Lambda or EventBridge SDK client (the drain would be
 * their only user); `@smithy/signature-v4` is the signer the SDK clients already bring. Each
 * command is a class named after its AWS action, so `AwsCaller` paces, bounds and retries it
 * like any SDK call, and errors carry the SDK's shape (`name`, `$metadata.httpStatusCode`), so
 * throttling and unknown outcomes are told apart the same way.
 */
export class UpdateEventSourceMappingCommand {
  constructor(readonly input: { readonly UUID: string; readonly Enabled: boolean }) {}
}
export class GetEventSourceMappingCommand {
  constructor(readonly input: { readonly UUID: string }) {}
}
export class DisableRuleCommand {
  constructor(readonly input: { readonly Name: string }) {}
}
export class DescribeRuleCommand {
  constructor(readonly input: { readonly Name: string }) {}
}
export type ScalingCommand = UpdateEventSourceMappingCommand | GetEventSourceMappingCommand | DisableRuleCommand | DescribeRuleCommand;

/** What the calls answer that the drain reads: the mapping's or the rule's state. */
export interface ScalingOutput {
  /** Lambda: Enabled | Enabling | Disabling | Disabled | ...; EventBridge: ENABLED | DISABLED | ... */
  readonly State?: string;
}

export interface ScalingApiOptions {
  readonly region: string;
  readonly credentials: AwsCredentialIdentityProvider;
  /** One endpoint for both services (moto); default: the Region's public endpoints. */
  readonly endpoint?: string;
  readonly fetch?: typeof fetch;
}

/** An AWS error answer, shaped as the SDK shapes them. */
export class ScalingApiError extends Error {
  readonly $metadata: { readonly httpStatusCode: number };
  constructor(name: string, status: number, message: string) {
    super(message);
    this.name = name;
    this.$metadata = { httpStatusCode: status };
  }
}

class NodeSha256 implements Checksum {
  private readonly hash;
  constructor(secret?: SourceData) {
    this.hash = secret === undefined ? createHash('sha256') : createHmac('sha256', toBuffer(secret));
  }
  update(data: Uint8Array): void {
    this.hash.update(data);
  }
  async digest(): Promise<Uint8Array> {
    return new Uint8Array(this.hash.digest());
  }
  reset(): void {
    throw new Error('not supported');
  }
}

function toBuffer(data: SourceData): Buffer {
  if (typeof data === 'string') return Buffer.from(data, 'utf8');
  if (ArrayBuffer.isView(data)) return Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  return Buffer.from(data);
}

interface Request {
  readonly service: 'lambda' | 'events';
  readonly method: 'GET' | 'PUT' | 'POST';
  readonly path: string;
  readonly headers: Record<string, string>;
  readonly body?: string;
}

function requestOf(command: ScalingCommand): Request {
  const mappingPath = (uuid: string) => `/2015-03-31/event-source-mappings/${encodeURIComponent(uuid)}`;
  const events = (target: string, body: object): Request => ({
    service: 'events',
    method: 'POST',
    path: '/',
    headers: { 'content-type': 'application/x-amz-json-1.1', 'x-amz-target': `AWSEvents.${target}` },
    body: JSON.stringify(body),
  });
  if (command instanceof UpdateEventSourceMappingCommand) {
    return { service: 'lambda', method: 'PUT', path: mappingPath(command.input.UUID), headers: { 'content-type': 'application/json' }, body: JSON.stringify({ Enabled: command.input.Enabled }) };
  }
  if (command instanceof GetEventSourceMappingCommand) return { service: 'lambda', method: 'GET', path: mappingPath(command.input.UUID), headers: {} };
  if (command instanceof DisableRuleCommand) return events('DisableRule', { Name: command.input.Name });
  return events('DescribeRule', { Name: command.input.Name });
}

/** A client with the SDK's `send(command, { abortSignal })`, for `AwsCaller`. */
export class ScalingApi {
  private readonly fetch: typeof fetch;
  private readonly signers = new Map<string, SignatureV4>();

  constructor(private readonly options: ScalingApiOptions) {
    this.fetch = options.fetch ?? fetch;
  }

  async send(command: ScalingCommand, options: { abortSignal?: AbortSignal } = {}): Promise<ScalingOutput> {
    const request = requestOf(command);
    const base = new URL(this.options.endpoint ?? `https://${request.service}.${this.options.region}.${dnsSuffix(this.options.region)}`);
    const signed = await this.signer(request.service).sign({
      method: request.method,
      protocol: base.protocol,
      hostname: base.hostname,
      ...(base.port ? { port: Number(base.port) } : {}),
      path: request.path,
      query: {},
      headers: { ...request.headers, host: base.host },
      ...(request.body === undefined ? {} : { body: request.body }),
    });
    const res = await this.fetch(new URL(request.path, base), {
      method: request.method,
      headers: signed.headers,
      ...(request.body === undefined ? {} : { body: request.body }),
      ...(options.abortSignal ? { signal: options.abortSignal } : {}),
    });
    const text = await res.text();
    const body = parse(text);
    if (!res.ok) {
      // restJson (Lambda) names the error in a header, awsJson (EventBridge) in __type.
      const type = res.headers.get('x-amzn-errortype') ?? (typeof body.__type === 'string' ? body.__type : undefined) ?? `Http${res.status}`;
      const name = type.split(':')[0]!.split('#').pop()!;
      const message = typeof body.message === 'string' ? body.message : typeof body.Message === 'string' ? body.Message : text.slice(0, 200);
      throw new ScalingApiError(name, res.status, message);
    }
    return typeof body.State === 'string' ? { State: body.State } : {};
  }

  private signer(service: string): SignatureV4 {
    let signer = this.signers.get(service);
    if (!signer) {
      signer = new SignatureV4({ service, region: this.options.region, credentials: this.options.credentials, sha256: NodeSha256 });
      this.signers.set(service, signer);
    }
    return signer;
  }
}

function parse(text: string): Record<string, unknown> {
  try {
    const value = JSON.parse(text) as unknown;
    return value && typeof value === 'object' ? (value as Record<string, unknown>) : {};
  } catch {
    return {};
  }
}

/** The Region's DNS suffix (the China Regions have their own). */
function dnsSuffix(region: string): string {
  return region.startsWith('cn-') ? 'amazonaws.com.cn' : 'amazonaws.com';
}
