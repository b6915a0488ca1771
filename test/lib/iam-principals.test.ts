import { beforeAll, describe, expect, it } from 'vitest';
import { PARAMETER_INSTANCE_ARN_TAG, PARAMETER_INSTANCE_TAG, Provider, bootLogGroupName } from '../../lambdas/shared/contract';
import type { Statement } from './iam-eval';
import { ACCOUNT, INSTANCE, REGION, STACK_ID, allowed, arn, denials, instanceArn, keys, paths, requestTags, resourceTags, synth, type Fleet } from './iam-fleet';
import type { AuthorizationRequest } from './iam-reference';

/**
 * The principals iam-launch.test.ts does not cover, judged the same way (iam-reference.ts):
 * the runner instance's role (the `aws` CLI calls of templates/start-runner.sh), the webhook,
 * the reconciler, the drain's two functions and the CDK provider framework around them, and
 * what the Lambda service does with each function's role (its log stream; scale-up's queue
 * polling). Each principal's calls are allowed, and what its security promises exclude is not.
 */

const OTHER = 'i-0fedcba9876543210';
/** What AWS adds to every request signed with an instance's role credentials (IAM User Guide, "AWS global condition context keys": ec2:SourceInstanceARN). */
const fromInstance = (id: string) => ({ 'ec2:SourceInstanceARN': instanceArn(id) });
const parameter = (name: string) => arn('ssm', `parameter${name}`);
/** GetParametersByPath is authorized on the path's ARN (the grants name it without the trailing slash). */
const pathArn = (root: string) => parameter(root.replace(/\/$/, ''));
const ssm = (name: string, action: string, parameterName: string, facts: Record<string, string | string[]> = {}): AuthorizationRequest => ({ name, action, resourceType: 'parameter', resource: parameter(parameterName), facts });
/** A parameter's tags, as both condition keys name them; the reference keeps the one it lists. */
const parameterTags = (tags: Record<string, string>) => ({
  ...Object.fromEntries(Object.entries(tags).map(([k, v]) => [`aws:ResourceTag/${k}`, v])),
  ...Object.fromEntries(Object.entries(tags).map(([k, v]) => [`ssm:resourceTag/${k}`, v])),
});
const configOf = (id: string) => parameterTags({ [PARAMETER_INSTANCE_TAG]: id, [PARAMETER_INSTANCE_ARN_TAG]: instanceArn(id) });
const ec2On = (name: string, action: string, id: string, tags: Record<string, string>, caller: string, extra: Record<string, string | string[]> = {}): AuthorizationRequest => ({
  name,
  action,
  resourceType: 'instance',
  resource: instanceArn(id),
  facts: { ...resourceTags(tags), 'ec2:InstanceID': id, 'ec2:Region': REGION, ...fromInstance(caller), ...extra },
});
const viaSsm = { 'kms:ViaService': `ssm.${REGION}.amazonaws.com`, 'kms:CallerAccount': ACCOUNT };
const decrypt = (f: Fleet, name: string, facts: Record<string, string> = viaSsm): AuthorizationRequest => ({ name, action: 'kms:Decrypt', resourceType: 'key', resource: f.keyArn!, facts, resourcePolicy: f.keyPolicy! });
/** The Lambda service writes a function's log to a stream of its log group with the function's role. */
const logWrites = (name: string, groupArn: string): AuthorizationRequest[] =>
  ['logs:CreateLogStream', 'logs:PutLogEvents'].map((action) => ({ name: `${name} ${action}`, action, resourceType: 'log-stream', resource: groupArn.replace(/:\*$/, ':log-stream:2026/12/06/[$LATEST]0123'), facts: {} }));
const send = (name: string, queueArn: string): AuthorizationRequest => ({ name, action: 'sqs:SendMessage', resourceType: 'queue', resource: queueArn, facts: {} });
const invoke = (name: string, functionArn: string): AuthorizationRequest => ({ name, action: 'lambda:InvokeFunction', resourceType: 'function', resource: functionArn, facts: {} });
const role = (f: Fleet, prefix: string): Statement[] => f.statements(prefix);

/** Calls no principal but the named ones may make: EC2 control, runner configs, the CI secrets. */
function foreignCalls(f: Fleet): AuthorizationRequest[] {
  const tagged = { [keys.pool]: 'linux' };
  return [
    { name: 'RunInstances', action: 'ec2:RunInstances', resourceType: 'instance', resource: instanceArn('*'), facts: {} },
    { name: 'DescribeInstances', action: 'ec2:DescribeInstances', resourceType: undefined, resource: '*', facts: {} },
    ec2On('TerminateInstances of a fleet instance', 'ec2:TerminateInstances', INSTANCE, tagged, OTHER),
    ec2On('CreateTags on a fleet instance', 'ec2:CreateTags', INSTANCE, tagged, OTHER, requestTags([{ Key: keys.activatedAt, Value: 'x' }])),
    ssm('read a runner config', 'ssm:GetParameter', paths.runnerConfig(INSTANCE), configOf(INSTANCE)),
    ssm('write a runner config', 'ssm:PutParameter', paths.runnerConfig(INSTANCE)),
    { name: 'DynamoDB job records', action: 'dynamodb:UpdateItem', resourceType: 'table', resource: f.tableArn, facts: {} },
  ];
}

describe('the runner instance role: every aws CLI call of templates/start-runner.sh', () => {
  let f: Fleet;
  let keyed: Fleet;
  let plain: Fleet;
  let statements: Statement[];
  const own = { [keys.pool]: 'linux' };
  const LOG_STREAM = arn('logs', `log-group:${bootLogGroupName('warm-runners')}:log-stream:${INSTANCE}`);
  beforeAll(() => {
    f = synth({ reuse: true });
    keyed = synth({ key: true });
    plain = synth({});
    statements = role(f, 'RunnersFleetRole');
  });
  const calls = (): AuthorizationRequest[] => [
    // get_config / delete_config: its own parameter, tagged by scale-up (claim.ts, cold.ts) with its id and ARN.
    ssm('get_config: its config', 'ssm:GetParameter', paths.runnerConfig(INSTANCE), { ...configOf(INSTANCE), ...fromInstance(INSTANCE) }),
    // WAIT polls before the config exists: no tags, and SSM must answer ParameterNotFound, not AccessDenied.
    ssm('WAIT: its config not written yet', 'ssm:GetParameter', paths.runnerConfig(INSTANCE), fromInstance(INSTANCE)),
    ssm('delete_config: its config', 'ssm:DeleteParameter', paths.runnerConfig(INSTANCE), { ...configOf(INSTANCE), ...fromInstance(INSTANCE) }),
    // ship: its own stream in the fleet's boot log group.
    { name: 'ship: create-log-stream', action: 'logs:CreateLogStream', resourceType: 'log-stream', resource: LOG_STREAM, facts: fromInstance(INSTANCE) },
    { name: 'ship: put-log-events', action: 'logs:PutLogEvents', resourceType: 'log-stream', resource: LOG_STREAM, facts: fromInstance(INSTANCE) },
    // tag_job_started, tag_failure (before the job started), terminate.
    ec2On('tag_job_started', 'ec2:CreateTags', INSTANCE, own, INSTANCE, requestTags([{ Key: keys.jobStarted, Value: 'now' }])),
    ec2On('tag_failure', 'ec2:CreateTags', INSTANCE, own, INSTANCE, requestTags([{ Key: keys.startFailure, Value: 'reason' }])),
    ec2On('terminate', 'ec2:TerminateInstances', INSTANCE, own, INSTANCE),
  ];
  const parkCalls = (): AuthorizationRequest[] => {
    const activated = { ...own, [keys.activatedAt]: 'a', [keys.traceId]: 't', [keys.jobId]: '42', [keys.runnerId]: 'r', [keys.jobStarted]: 's', [keys.affinity]: 'github:org/repo' };
    return [
      ec2On('park: parking tag', 'ec2:CreateTags', INSTANCE, activated, INSTANCE, requestTags([{ Key: keys.parking, Value: 'a b' }])),
      ec2On('park: uses and warm-standby', 'ec2:CreateTags', INSTANCE, activated, INSTANCE, requestTags([{ Key: keys.uses, Value: '1' }, { Key: keys.warmStandby, Value: 'true' }])),
      ec2On('park: untag the activation', 'ec2:DeleteTags', INSTANCE, activated, INSTANCE, requestTags([keys.activatedAt, keys.traceId, keys.jobId, keys.runnerId, keys.jobStarted, keys.idleSince].map((Key) => ({ Key })))),
    ];
  };

  it('allows each call, on the instance itself', async () => {
    expect(await denials(statements, [...calls(), ...parkCalls()])).toEqual([]);
    expect(await denials(role(plain, 'RunnersFleetRole'), calls())).toEqual([]);
    const k = role(keyed, 'RunnersFleetRole');
    expect(await denials(k, [...calls(), decrypt(keyed, 'get_config: decrypt through SSM', { ...viaSsm, ...fromInstance(INSTANCE) })])).toEqual([]);
  });

  it("refuses another instance's config, the eviction lock, the CI secrets, and any parameter write", async () => {
    const other = configOf(OTHER);
    expect(
      await allowed(statements, [
        ssm("another instance's config: read", 'ssm:GetParameter', paths.runnerConfig(OTHER), { ...other, ...fromInstance(INSTANCE) }),
        ssm("another instance's config: delete", 'ssm:DeleteParameter', paths.runnerConfig(OTHER), { ...other, ...fromInstance(INSTANCE) }),
        ssm('a config tagged with another ARN under its own name', 'ssm:GetParameter', paths.runnerConfig(INSTANCE), { ...other, ...fromInstance(INSTANCE) }),
        ssm("the pool's eviction lock (instance-id tag only)", 'ssm:GetParameter', paths.runnerConfig(INSTANCE), { ...parameterTags({ [PARAMETER_INSTANCE_TAG]: INSTANCE }), ...fromInstance(INSTANCE) }),
        ssm('the GitHub App key', 'ssm:GetParameter', paths.github.appPrivateKey, fromInstance(INSTANCE)),
        ssm('the GitLab token', 'ssm:GetParameter', paths.gitlab.token, fromInstance(INSTANCE)),
        ssm('its config: write', 'ssm:PutParameter', paths.runnerConfig(INSTANCE), fromInstance(INSTANCE)),
        ssm('the fleet config', 'ssm:GetParameter', paths.fleetConfig, fromInstance(INSTANCE)),
        { name: 'another log group', action: 'logs:PutLogEvents', resourceType: 'log-stream', resource: arn('logs', `log-group:/aws/lambda/x:log-stream:${INSTANCE}`), facts: {} },
      ]),
    ).toEqual([]);
    expect(await allowed(role(keyed, 'RunnersFleetRole'), [decrypt(keyed, 'decrypt outside SSM', { 'kms:CallerAccount': ACCOUNT, ...fromInstance(INSTANCE) })])).toEqual([]);
  });

  it('tags and terminates only itself, never with the affinity, the pool or an activation key', async () => {
    const other = { [keys.pool]: 'linux' };
    const activated = { ...own, [keys.activatedAt]: 'a', [keys.jobStarted]: 's' };
    expect(
      await allowed(statements, [
        ec2On('terminate another fleet instance', 'ec2:TerminateInstances', OTHER, other, INSTANCE),
        ec2On('terminate itself outside a fleet (no pool tag)', 'ec2:TerminateInstances', INSTANCE, {}, INSTANCE),
        ec2On('stop another instance', 'ec2:StopInstances', OTHER, other, INSTANCE),
        ec2On("another instance's job start", 'ec2:CreateTags', OTHER, other, INSTANCE, requestTags([{ Key: keys.jobStarted, Value: 'x' }])),
        ec2On("another instance's parking", 'ec2:CreateTags', OTHER, other, INSTANCE, requestTags([{ Key: keys.parking, Value: 'x' }])),
        ec2On("another instance's activation removed", 'ec2:DeleteTags', OTHER, activated, INSTANCE, requestTags([{ Key: keys.activatedAt }])),
        ec2On('its affinity written', 'ec2:CreateTags', INSTANCE, activated, INSTANCE, requestTags([{ Key: keys.affinity, Value: 'github:other/repo' }])),
        ec2On('its affinity written with parking keys', 'ec2:CreateTags', INSTANCE, activated, INSTANCE, requestTags([{ Key: keys.parking, Value: 'x' }, { Key: keys.affinity, Value: 'x' }])),
        ec2On('its affinity removed', 'ec2:DeleteTags', INSTANCE, activated, INSTANCE, requestTags([{ Key: keys.affinity }])),
        ec2On('its pool tag removed', 'ec2:DeleteTags', INSTANCE, activated, INSTANCE, requestTags([{ Key: keys.pool }])),
        ec2On('every tag removed (DeleteTags without keys)', 'ec2:DeleteTags', INSTANCE, activated, INSTANCE),
        ec2On('its activation written', 'ec2:CreateTags', INSTANCE, own, INSTANCE, requestTags([{ Key: keys.activatedAt, Value: 'x' }])),
        ec2On('its idle mark written', 'ec2:CreateTags', INSTANCE, activated, INSTANCE, requestTags([{ Key: keys.idleSince, Value: 'x' }])),
        ec2On('a start failure after its job started', 'ec2:CreateTags', INSTANCE, activated, INSTANCE, requestTags([{ Key: keys.startFailure, Value: 'x' }])),
      ]),
    ).toEqual([]);
    // Without reuse, no pool may park: the parking grants are not there.
    expect(await allowed(role(plain, 'RunnersFleetRole'), parkCalls())).toEqual([]);
  });
});

describe('the webhook, the reconciler, the drain and the provider framework', () => {
  let f: Fleet;
  let keyed: Fleet;
  beforeAll(() => {
    f = synth({ gitlab: true, spot: true });
    keyed = synth({ key: true, gitlab: true });
  });
  const fleetConfig = () => ssm('the fleet config', 'ssm:GetParameter', paths.fleetConfig);
  const queue = (x: Fleet) => x.arnOf('RunnersJobsQueue', 'AWS::SQS::Queue');
  const deadLetters = (x: Fleet) => x.arnOf('RunnersJobsDeadLetterQueue', 'AWS::SQS::Queue');

  it('webhook: its secrets, the fleet config, the jobs queue, the dead-letter record of a job too large, its log', async () => {
    const calls = (x: Fleet) => [
      fleetConfig(),
      ssm('GitHub webhook secret', 'ssm:GetParameter', paths.github.webhookSecret),
      ssm('GitLab webhook token', 'ssm:GetParameter', paths.gitlab.webhookToken),
      ssm('GitLab signing key', 'ssm:GetParameter', paths.gitlab.webhookSigningKey),
      ssm("GitLab token (the job's tags)", 'ssm:GetParameter', paths.gitlab.token),
      send('queue a job', queue(x)),
      send('record a job too large', deadLetters(x)),
      ...logWrites('log', x.arnOf('RunnersWebhookLogs', 'AWS::Logs::LogGroup')),
    ];
    expect(await denials(role(f, 'RunnersWebhookRole'), calls(f))).toEqual([]);
    expect(await denials(role(keyed, 'RunnersWebhookRole'), [...calls(keyed), decrypt(keyed, 'secrets through SSM')])).toEqual([]);
    expect(await allowed(role(f, 'RunnersWebhookRole'), [...foreignCalls(f), ssm('the GitHub App key', 'ssm:GetParameter', paths.github.appPrivateKey), { name: 'receive jobs', action: 'sqs:ReceiveMessage', resourceType: 'queue', resource: queue(f), facts: {} }])).toEqual([]);
  });

  it('reconciler: the CI credentials, the fleet config, the jobs queue, its log', async () => {
    const calls = (x: Fleet) => [
      fleetConfig(),
      ssm('GitHub App key', 'ssm:GetParameter', paths.github.appPrivateKey),
      ssm('GitLab token', 'ssm:GetParameter', paths.gitlab.token),
      send('re-queue a missed job', queue(x)),
      ...logWrites('log', x.arnOf('RunnersReconcileFunctionLogs', 'AWS::Logs::LogGroup')),
    ];
    expect(await denials(role(f, 'RunnersReconcileFunctionRole'), calls(f))).toEqual([]);
    expect(await denials(role(keyed, 'RunnersReconcileFunctionRole'), [...calls(keyed), decrypt(keyed, 'secrets through SSM')])).toEqual([]);
    expect(await allowed(role(f, 'RunnersReconcileFunctionRole'), [...foreignCalls(f), ssm('GitHub webhook secret', 'ssm:GetParameter', paths.github.webhookSecret), send('dead letters', deadLetters(f))])).toEqual([]);
  });

  it('drain: onEvent reads the stack and stops scaling; isComplete observes and removes the fleet', async () => {
    const mapping = arn('lambda', `event-source-mapping:${f.ref('RunnersScaleUpSqsEventSource', 'AWS::Lambda::EventSourceMapping')}`);
    const rules = ['RunnersReconcileSchedule', 'RunnersPoolSchedule', 'RunnersScaleDownSchedule'].map((id) => f.arnOf(id, 'AWS::Events::Rule'));
    const rule = (name: string, action: string, resource: string): AuthorizationRequest => ({ name, action, resourceType: 'rule-on-default-event-bus', resource, facts: {} });
    const onEvent = [
      { name: 'DescribeStacks', action: 'cloudformation:DescribeStacks', resourceType: 'stack', resource: STACK_ID, facts: {} },
      { name: 'disable the mapping', action: 'lambda:UpdateEventSourceMapping', resourceType: 'eventSourceMapping', resource: mapping, facts: {} },
      ...rules.map((r) => rule('disable a schedule', 'events:DisableRule', r)),
      ...logWrites('log', f.arnOf('RunnersDrainStopScalingLogs', 'AWS::Logs::LogGroup')),
    ];
    expect(await denials(role(f, 'RunnersDrainStopScalingRole'), onEvent)).toEqual([]);
    const fleet = { [keys.pool]: 'linux' };
    const isComplete = (x: Fleet) => [
      fleetConfig(),
      { name: 'mapping state', action: 'lambda:GetEventSourceMapping', resourceType: 'eventSourceMapping', resource: mapping, facts: {} },
      { name: 'mapping disabled again', action: 'lambda:UpdateEventSourceMapping', resourceType: 'eventSourceMapping', resource: mapping, facts: {} },
      ...rules.flatMap((r) => [rule('schedule state', 'events:DescribeRule', r), rule('schedule disabled again', 'events:DisableRule', r)]),
      { name: 'describe the fleet', action: 'ec2:DescribeInstances', resourceType: undefined, resource: '*', facts: { 'ec2:Region': REGION } },
      { ...ssm('list the configs', 'ssm:GetParametersByPath', paths.runnerConfigRoot, { 'ssm:Recursive': 'true' }), resource: pathArn(paths.runnerConfigRoot) },
      { ...ssm('list the pool state', 'ssm:GetParametersByPath', paths.poolStateRoot, { 'ssm:Recursive': 'true' }), resource: pathArn(paths.poolStateRoot) },
      ssm('GitHub App key exists / is read', 'ssm:GetParameter', paths.github.appPrivateKey),
      ssm('GitLab token exists / is read', 'ssm:GetParameter', paths.gitlab.token),
      { name: 'cancel spot requests', action: 'ec2:CancelSpotInstanceRequests', resourceType: 'spot-instances-request', resource: arn('ec2', 'spot-instances-request/sir-1'), facts: { 'ec2:Region': REGION } },
      ec2On('terminate the fleet', 'ec2:TerminateInstances', INSTANCE, fleet, INSTANCE),
      ssm('delete the configs', 'ssm:DeleteParameters', paths.runnerConfig(INSTANCE)),
      ssm('delete the pool state', 'ssm:DeleteParameters', paths.primeState('linux')),
      ...logWrites('log', x.arnOf('RunnersDrainDrainLogs', 'AWS::Logs::LogGroup')),
    ];
    expect(await denials(role(f, 'RunnersDrainDrainRole'), isComplete(f))).toEqual([]);
    expect(await denials(role(keyed, 'RunnersDrainDrainRole'), [decrypt(keyed, 'CI credential through SSM')])).toEqual([]);
    // The drain removes the fleet, nothing else: no instance outside it, no CI secret, no other rule.
    expect(
      await allowed(role(f, 'RunnersDrainDrainRole'), [
        ec2On('terminate an instance outside the fleet', 'ec2:TerminateInstances', OTHER, {}, INSTANCE),
        ssm('delete a CI secret', 'ssm:DeleteParameters', paths.github.appPrivateKey),
        ssm('delete the fleet config', 'ssm:DeleteParameters', paths.fleetConfig),
        ssm('read a runner config', 'ssm:GetParameter', paths.runnerConfig(INSTANCE)),
        rule('disable another rule', 'events:DisableRule', arn('events', 'rule/other')),
        ec2On('tag a fleet instance', 'ec2:CreateTags', INSTANCE, fleet, INSTANCE, requestTags([{ Key: keys.activatedAt, Value: 'x' }])),
      ]),
    ).toEqual([]);
    expect(await allowed(role(f, 'RunnersDrainStopScalingRole'), [rule('disable another rule', 'events:DisableRule', arn('events', 'rule/other')), ...foreignCalls(f)])).toEqual([]);
  });

  it("the provider framework: onEvent invokes the drain's onEvent and starts the waiter; the waiter polls isComplete", async () => {
    const stop = f.arnOf('RunnersDrainStopScaling', 'AWS::Lambda::Function');
    const drain = f.arnOf('RunnersDrain35', 'AWS::Lambda::Function');
    const waiter = f.ref('RunnersDrainProviderwaiterstatemachine', 'AWS::StepFunctions::StateMachine');
    expect(
      await denials(role(f, 'RunnersDrainFrameworkOnEventRole'), [
        invoke('invoke onEvent', stop),
        { name: 'onEvent is active', action: 'lambda:GetFunction', resourceType: 'function', resource: stop, facts: {} },
        { name: 'start the waiter', action: 'states:StartExecution', resourceType: 'statemachine', resource: waiter, facts: {} },
      ]),
    ).toEqual([]);
    expect(await denials(role(f, 'RunnersDrainFrameworkWaiterRole'), [invoke('invoke isComplete', drain)])).toEqual([]);
    const frameworkLogs = f.arnOf('RunnersDrainFrameworkLogs', 'AWS::Logs::LogGroup');
    for (const prefix of ['RunnersDrainFrameworkOnEventRole', 'RunnersDrainFrameworkWaiterRole']) expect(await denials(role(f, prefix), logWrites('log', frameworkLogs)), prefix).toEqual([]);
    const isComplete = f.arnOf('RunnersDrainProviderframeworkisComplete', 'AWS::Lambda::Function');
    const onTimeout = f.arnOf('RunnersDrainProviderframeworkonTimeout', 'AWS::Lambda::Function');
    expect(await denials(role(f, 'RunnersDrainProviderwaiterstatemachineRole'), [invoke('isComplete', isComplete), invoke('onTimeout', onTimeout)])).toEqual([]);
    for (const prefix of ['RunnersDrainFrameworkOnEventRole', 'RunnersDrainFrameworkWaiterRole', 'RunnersDrainProviderwaiterstatemachineRole']) {
      expect(await allowed(role(f, prefix), [...foreignCalls(f), invoke('another function', f.arnOf('RunnersScaleUp3', 'AWS::Lambda::Function'))]), prefix).toEqual([]);
    }
  });

  it("the Lambda service with each function's role: its own log group, and scale-up's polling of the jobs queue", async () => {
    for (const [rolePrefix, logs] of [
      ['RunnersScaleUpRole', 'RunnersScaleUpLogs'],
      ['RunnersPoolRole', 'RunnersPoolLogs'],
      ['RunnersScaleDownRole', 'RunnersScaleDownLogs'],
    ] as const) {
      expect(await denials(role(f, rolePrefix), logWrites(rolePrefix, f.arnOf(logs, 'AWS::Logs::LogGroup'))), rolePrefix).toEqual([]);
    }
    // ChangeMessageVisibility is also scale-up's own call (queue.ts `hideUntil`: an early wait
    // copy, and a message whose cold launch is unknown, brought back inside the take-over window).
    const poll = ['sqs:ReceiveMessage', 'sqs:DeleteMessage', 'sqs:ChangeMessageVisibility', 'sqs:GetQueueAttributes'].map((action) => ({ name: action, action, resourceType: 'queue', resource: queue(f), facts: {} }));
    expect(await denials(role(f, 'RunnersScaleUpRole'), poll)).toEqual([]);
    // Every role in the stack is one this file or iam-launch.test.ts judges.
    const judged = ['RunnersFleetRole', 'RunnersWebhookRole', 'RunnersScaleUpRole', 'RunnersPoolRole', 'RunnersScaleDownRole', 'RunnersReconcileFunctionRole', 'RunnersRunnerReleaseFunctionRole', 'RunnersDrainStopScalingRole', 'RunnersDrainDrainRole', 'RunnersDrainFrameworkOnEventRole', 'RunnersDrainFrameworkWaiterRole', 'RunnersDrainProviderwaiterstatemachineRole'];
    for (const id of Object.keys(f.template.findResources('AWS::IAM::Role'))) expect(judged.some((p) => id.startsWith(p)), id).toBe(true);
  });
});

describe('runner updates: the release resolver, and the reads and tag of a pool that follows the newest release', () => {
  let f: Fleet;
  let pinned: Fleet;
  let keyed: Fleet;
  beforeAll(() => {
    f = synth({});
    pinned = synth({ pinned: true });
    keyed = synth({ key: true });
  });
  const github = paths.runnerRelease(Provider.GITHUB);
  const gitlab = paths.runnerRelease(Provider.GITLAB);
  const own = { [keys.pool]: 'linux' };

  it('resolver: the fleet config, the release parameter of each followed provider (read and write), its log; nothing else', async () => {
    const calls = (x: Fleet) => [
      ssm('the fleet config', 'ssm:GetParameter', paths.fleetConfig),
      ssm('the stored release', 'ssm:GetParameter', github),
      ssm('the newer release', 'ssm:PutParameter', github),
      ...logWrites('log', x.arnOf('RunnersRunnerReleaseFunctionLogs', 'AWS::Logs::LogGroup')),
    ];
    expect(await denials(role(f, 'RunnersRunnerReleaseFunctionRole'), calls(f))).toEqual([]);
    expect(await denials(role(keyed, 'RunnersRunnerReleaseFunctionRole'), calls(keyed))).toEqual([]);
    const never = (x: Fleet) => [
      ...foreignCalls(x),
      ssm('a provider no pool follows', 'ssm:PutParameter', gitlab),
      ssm('the fleet config: write', 'ssm:PutParameter', paths.fleetConfig),
      ssm('the GitHub App key', 'ssm:GetParameter', paths.github.appPrivateKey),
      ssm('a prime streak', 'ssm:PutParameter', paths.primeState('linux')),
    ];
    expect(await allowed(role(f, 'RunnersRunnerReleaseFunctionRole'), never(f))).toEqual([]);
    expect(await allowed(role(keyed, 'RunnersRunnerReleaseFunctionRole'), [decrypt(keyed, 'decrypt through SSM')])).toEqual([]);
    // A fleet of pins keeps no release: the resolver only publishes the window.
    expect(await allowed(role(pinned, 'RunnersRunnerReleaseFunctionRole'), [ssm('the stored release', 'ssm:GetParameter', github), ssm('a release', 'ssm:PutParameter', github)])).toEqual([]);
    expect(await denials(role(pinned, 'RunnersRunnerReleaseFunctionRole'), [ssm('the fleet config', 'ssm:GetParameter', paths.fleetConfig)])).toEqual([]);
  });

  it('pool: reads the release of the providers it follows, writes none', async () => {
    expect(await denials(role(f, 'RunnersPoolRole'), [ssm('readCurrentRunner', 'ssm:GetParameter', github)])).toEqual([]);
    expect(await allowed(role(f, 'RunnersPoolRole'), [ssm('write the release', 'ssm:PutParameter', github), ssm('another provider', 'ssm:GetParameter', gitlab)])).toEqual([]);
    expect(await allowed(role(pinned, 'RunnersPoolRole'), [ssm('a pinned fleet', 'ssm:GetParameter', github)])).toEqual([]);
  });

  it('instance: resolved_release reads its provider\'s release; tag_version tags itself with that key only', async () => {
    const statements = role(f, 'RunnersFleetRole');
    const calls = [
      ssm('resolved_release', 'ssm:GetParameter', github, fromInstance(INSTANCE)),
      ec2On('tag_version', 'ec2:CreateTags', INSTANCE, own, INSTANCE, requestTags([{ Key: keys.runnerVersion, Value: '2.339.0' }])),
    ];
    expect(await denials(statements, calls)).toEqual([]);
    expect(await denials(role(pinned, 'RunnersFleetRole'), calls.slice(1))).toEqual([]);
    expect(
      await allowed(statements, [
        ssm('write the release', 'ssm:PutParameter', github, fromInstance(INSTANCE)),
        ssm('a provider no pool follows', 'ssm:GetParameter', gitlab, fromInstance(INSTANCE)),
        ec2On("another instance's runner version", 'ec2:CreateTags', OTHER, own, INSTANCE, requestTags([{ Key: keys.runnerVersion, Value: 'x' }])),
        ec2On('its runner version with its activation', 'ec2:CreateTags', INSTANCE, own, INSTANCE, requestTags([{ Key: keys.runnerVersion, Value: 'x' }, { Key: keys.activatedAt, Value: 'x' }])),
      ]),
    ).toEqual([]);
    expect(await allowed(role(pinned, 'RunnersFleetRole'), [ssm('a pinned pool', 'ssm:GetParameter', github, fromInstance(INSTANCE))])).toEqual([]);
  });
});
