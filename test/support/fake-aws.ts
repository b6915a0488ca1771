import {
  CancelSpotInstanceRequestsCommand,
  CreateFleetCommand,
  CreateTagsCommand,
  DeleteTagsCommand,
  DescribeInstancesCommand,
  EC2Client,
  RunInstancesCommand,
  StartInstancesCommand,
  TerminateInstancesCommand,
  type Filter,
  type Instance,
} from '@aws-sdk/client-ec2';
import { ChangeMessageVisibilityCommand, SendMessageCommand, SQSClient } from '@aws-sdk/client-sqs';
import { DeleteParameterCommand, DeleteParametersCommand, GetParameterCommand, GetParametersByPathCommand, PutParameterCommand, SSMClient } from '@aws-sdk/client-ssm';
import { mockClient } from 'aws-sdk-client-mock';

/**
 * An in-memory EC2/SSM/SQS behind aws-sdk-client-mock, so handler tests read like the moto
 * ones while any call can be made to fail, hang or answer oddly (`fault`).
 */
export interface FakeInstance {
  id: string;
  state: string;
  reason?: string;
  launchTime: Date;
  tags: Map<string, string>;
  spotRequestId?: string;
  /** When set, the primary network interface's attach time, which EC2 keeps across stop and start (LaunchTime it moves). */
  firstLaunchTime?: Date;
}

/**
 * An error to throw, 'hang' (never answer), 'pass' (answer normally), an answer of its own,
 * or a lost answer (`lostAnswer`): the call runs, then its answer is lost.
 */
export type Fault = Error | 'hang' | 'pass' | LostAnswer | ((input: Record<string, unknown>) => unknown);

export interface LostAnswer {
  readonly lost: Error;
  /** Runs after the call executed, before the error reaches the caller. */
  readonly then?: (input: Record<string, unknown>) => void;
}

/** The call executes, then its answer is lost: a 503 after the fact by default. */
export function lostAnswer(error: Error = awsError('ServiceUnavailable', 503), then?: (input: Record<string, unknown>) => void): LostAnswer {
  return { lost: error, ...(then ? { then } : {}) };
}

export function awsError(name: string, status = 400): Error {
  return Object.assign(new Error(`${name} (injected)`), { name, $metadata: { httpStatusCode: status } });
}

export class FakeAws {
  readonly ec2 = mockClient(EC2Client);
  readonly ssm = mockClient(SSMClient);
  readonly sqs = mockClient(SQSClient);
  readonly instances = new Map<string, FakeInstance>();
  readonly parameters = new Map<string, { value: string; tags: Record<string, string>; at: Date; type?: string }>();
  readonly sent: { queueUrl: string; body: string; groupId?: string; dedupId?: string; attributes: Record<string, string> }[] = [];
  readonly visibility: { receiptHandle: string; seconds: number }[] = [];
  readonly calls: string[] = [];
  /** The actions of the calls answered with an error by the fake itself (not injected faults). */
  readonly refused: string[] = [];
  private readonly faults = new Map<string, Fault[]>();
  private serial = 0;
  now = new Date('2026-11-29T12:00:00.000Z');

  constructor() {
    this.ec2.on(DescribeInstancesCommand).callsFake((i) => this.run('DescribeInstances', i, () => this.describe(i.Filters ?? [])));
    this.ec2.on(StartInstancesCommand).callsFake((i) =>
      this.run('StartInstances', i, () => {
        for (const id of i.InstanceIds) if (!this.instances.has(id)) throw awsError('InvalidInstanceID.NotFound');
        return {
          StartingInstances: i.InstanceIds.map((id: string) => {
            const inst = this.instances.get(id)!;
            const previous = inst.state;
            inst.state = 'running';
            delete inst.reason;
            return { InstanceId: id, PreviousState: { Name: previous }, CurrentState: { Name: 'pending' } };
          }),
        };
      }),
    );
    this.ec2.on(CreateTagsCommand).callsFake((i) =>
      this.run('CreateTags', i, () => {
        for (const id of i.Resources) for (const t of i.Tags) this.instances.get(id)?.tags.set(t.Key, t.Value);
        return {};
      }),
    );
    this.ec2.on(DeleteTagsCommand).callsFake((i) =>
      this.run('DeleteTags', i, () => {
        for (const id of i.Resources)
          for (const t of i.Tags) {
            const inst = this.instances.get(id);
            if (inst && (t.Value === undefined || inst.tags.get(t.Key) === t.Value)) inst.tags.delete(t.Key);
          }
        return {};
      }),
    );
    this.ec2.on(CreateFleetCommand).callsFake((i) =>
      this.run('CreateFleet', i, () => {
        const tags = (i.TagSpecifications?.[0]?.Tags ?? []).map((t: { Key: string; Value: string }) => [t.Key, t.Value]);
        const inst = this.addInstance({ state: 'running', tags: Object.fromEntries(tags) });
        return { Instances: [{ InstanceIds: [inst.id], Lifecycle: i.TargetCapacitySpecification.DefaultTargetCapacityType }], Errors: [] };
      }),
    );
    this.ec2.on(RunInstancesCommand).callsFake((i) =>
      this.run('RunInstances', i, () => {
        const tags = (i.TagSpecifications?.[0]?.Tags ?? []).map((t: { Key: string; Value: string }) => [t.Key, t.Value]);
        const made = Array.from({ length: i.MaxCount }, () => this.addInstance({ state: 'pending', tags: Object.fromEntries(tags) }));
        return { Instances: made.map((m) => ({ InstanceId: m.id })) };
      }),
    );
    this.ec2.on(TerminateInstancesCommand).callsFake((i) =>
      this.run('TerminateInstances', i, () => {
        for (const id of i.InstanceIds) {
          const inst = this.instances.get(id);
          if (inst) inst.state = 'terminated';
        }
        return { TerminatingInstances: i.InstanceIds.map((id: string) => ({ InstanceId: id })) };
      }),
    );
    this.ec2.on(CancelSpotInstanceRequestsCommand).callsFake((i) => this.run('CancelSpotInstanceRequests', i, () => ({ CancelledSpotInstanceRequests: [] })));
    this.ssm.on(PutParameterCommand).callsFake((i) =>
      this.run('PutParameter', i, () => {
        if (this.parameters.has(i.Name) && !i.Overwrite) throw awsError('ParameterAlreadyExists');
        // An overwrite keeps the tags (SSM takes tags only on creation).
        const tags = this.parameters.get(i.Name)?.tags ?? Object.fromEntries((i.Tags ?? []).map((t: { Key: string; Value: string }) => [t.Key, t.Value]));
        this.parameters.set(i.Name, { value: i.Value, tags, at: this.now, type: i.Type });
        return { Version: 1 };
      }),
    );
    this.ssm.on(GetParameterCommand).callsFake((i) =>
      this.run('GetParameter', i, () => {
        const p = this.parameters.get(i.Name);
        if (!p) throw awsError('ParameterNotFound');
        return { Parameter: { Name: i.Name, Value: p.value } };
      }),
    );
    this.ssm.on(DeleteParameterCommand).callsFake((i) =>
      this.run('DeleteParameter', i, () => {
        if (!this.parameters.delete(i.Name)) throw awsError('ParameterNotFound');
        return {};
      }),
    );
    this.ssm.on(DeleteParametersCommand).callsFake((i) =>
      this.run('DeleteParameters', i, () => {
        const deleted = (i.Names as string[]).filter((n) => this.parameters.delete(n));
        return { DeletedParameters: deleted, InvalidParameters: (i.Names as string[]).filter((n) => !deleted.includes(n)) };
      }),
    );
    this.ssm.on(GetParametersByPathCommand).callsFake((i) =>
      this.run('GetParametersByPath', i, () => ({
        // Without decryption a SecureString's value is ciphertext; a String's is readable.
        Parameters: [...this.parameters.entries()]
          .filter(([n]) => n.startsWith(i.Path))
          .map(([Name, p]) => ({ Name, LastModifiedDate: p.at, Type: p.type ?? 'SecureString', Value: p.type === 'String' || i.WithDecryption ? p.value : 'AQICAH-ciphertext' })),
      })),
    );
    this.sqs.on(SendMessageCommand).callsFake((i) =>
      this.run('SendMessage', i, () => {
        const attributes = Object.fromEntries(Object.entries(i.MessageAttributes ?? {}).map(([k, v]) => [k, (v as { StringValue: string }).StringValue]));
        this.sent.push({ queueUrl: i.QueueUrl, body: i.MessageBody, groupId: i.MessageGroupId, dedupId: i.MessageDeduplicationId, attributes });
        return { MessageId: `m-${++this.serial}` };
      }),
    );
    this.sqs.on(ChangeMessageVisibilityCommand).callsFake((i) =>
      this.run('ChangeMessageVisibility', i, () => {
        this.visibility.push({ receiptHandle: i.ReceiptHandle, seconds: i.VisibilityTimeout });
        return {};
      }),
    );
  }

  /** The next call(s) of `action` fail with, hang on, or are answered by these, in order. */
  fault(action: string, ...faults: Fault[]): void {
    this.faults.set(action, [...(this.faults.get(action) ?? []), ...faults]);
  }

  count(action: string): number {
    return this.calls.filter((c) => c === action).length;
  }

  addInstance(spec: { state: string; reason?: string; tags: Record<string, string>; launchTime?: Date; spotRequestId?: string; firstLaunchTime?: Date }): FakeInstance {
    const id = `i-${(0x10000000 + ++this.serial).toString(16).padStart(17, '0')}`;
    const inst: FakeInstance = {
      id,
      state: spec.state,
      ...(spec.reason ? { reason: spec.reason } : {}),
      launchTime: spec.launchTime ?? this.now,
      tags: new Map(Object.entries(spec.tags)),
      ...(spec.spotRequestId ? { spotRequestId: spec.spotRequestId } : {}),
      ...(spec.firstLaunchTime ? { firstLaunchTime: spec.firstLaunchTime } : {}),
    };
    this.instances.set(id, inst);
    return inst;
  }

  restore(): void {
    this.ec2.restore();
    this.ssm.restore();
    this.sqs.restore();
  }

  private run(action: string, input: Record<string, unknown>, answer: () => unknown): Promise<unknown> {
    this.calls.push(action);
    const fault = this.faults.get(action)?.shift();
    if (fault === 'hang') return new Promise(() => {});
    if (fault === 'pass') return this.answer(action, answer);
    if (fault instanceof Error) return Promise.reject(fault);
    if (typeof fault === 'object') {
      return this.answer(action, answer).then(() => {
        fault.then?.(input);
        throw fault.lost;
      });
    }
    if (typeof fault === 'function') return Promise.resolve().then(() => fault(input));
    return this.answer(action, answer);
  }

  /**
   * Answers after a number of event-loop turns drawn from this (a seeded random source):
   * concurrent callers then interleave as they would over a network, without any timer.
   */
  turns?: () => number;

  private async answer(action: string, answer: () => unknown): Promise<unknown> {
    for (let n = this.turns?.() ?? 0; n > 0; n--) await new Promise((resolve) => setImmediate(resolve));
    try {
      return answer();
    } catch (error) {
      this.refused.push(action);
      throw error;
    }
  }

  private describe(filters: Filter[]): { Reservations: { Instances: Instance[] }[] } {
    const match = (inst: FakeInstance) =>
      filters.every((f) => {
        const values = f.Values ?? [];
        if (f.Name === 'instance-state-name') return values.includes(inst.state);
        if (f.Name === 'instance-id') return values.includes(inst.id);
        if (f.Name === 'tag-key') return values.some((v) => inst.tags.has(v));
        if (f.Name?.startsWith('tag:')) return values.includes(inst.tags.get(f.Name.slice(4)) ?? '\u0000');
        throw new Error(`fake DescribeInstances does not know filter ${f.Name}`);
      });
    const found = [...this.instances.values()].filter(match).map(
      (inst): Instance => ({
        InstanceId: inst.id,
        State: { Name: inst.state as never },
        ...(inst.reason ? { StateReason: { Code: inst.reason } } : {}),
        LaunchTime: inst.launchTime,
        Tags: [...inst.tags].map(([Key, Value]) => ({ Key, Value })),
        ...(inst.spotRequestId ? { SpotInstanceRequestId: inst.spotRequestId } : {}),
        ...(inst.firstLaunchTime ? { NetworkInterfaces: [{ Attachment: { DeviceIndex: 0, AttachTime: inst.firstLaunchTime } }] } : {}),
      }),
    );
    return { Reservations: found.length ? [{ Instances: found }] : [] };
  }
}
