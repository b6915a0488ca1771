import { ArnFormat, Aws, Stack } from 'aws-cdk-lib';
import * as iam from 'aws-cdk-lib/aws-iam';
import type * as kms from 'aws-cdk-lib/aws-kms';
import type { IConstruct } from 'constructs';
import { PARAMETER_INSTANCE_ARN_TAG, PARAMETER_INSTANCE_TAG, bootLogGroupName, ssmPaths, tagKeys } from '../lambdas/shared/contract';
import { acknowledgeWildcard, nagArn } from './nag';
import type { RunnerPoolProps } from './props';
import { followsLatestRunner } from './runner-version';

export interface InstanceGrantOptions {
  /** Fleet prefix (SSM paths, tag keys, the boot log group). */
  readonly prefix: string;
  /** The pools whose instances run with the role; its grants act on their instances only. */
  readonly pools: RunnerPoolProps[];
  /** KMS key of the runner config parameters, when not the AWS managed one. */
  readonly encryptionKey?: kms.IKey;
  /** Name of the fleet's CA certificates parameter (`caCertificates`), which the boot installs; absent without. */
  readonly caParameterName?: string;
}

/**
 * What a runner instance's role needs for the boot script's own calls (templates/start-runner.sh):
 * each on the instance itself, and, where the instance is the resource, only on an instance of
 * the role's pools (their pool tag), so a pool with a role of its own acts on nothing of another
 * pool's even if the self condition (aws:ARN, docs/security.md) were ever looser than documented.
 */
export function instanceStatements(scope: IConstruct, options: InstanceGrantOptions): iam.PolicyStatement[] {
  const stack = Stack.of(scope);
  const tags = tagKeys(options.prefix);
  const paths = ssmPaths(options.prefix);
  const poolNames = options.pools.map((p) => p.name);
  const ofItsPools = { [`aws:ResourceTag/${tags.pool}`]: poolNames };
  const configs = stack.formatArn({ service: 'ssm', resource: 'parameter', resourceName: `${paths.runnerConfigRoot.slice(1)}*` });
  const ownInstances = [stack.formatArn({ service: 'ec2', resource: 'instance', resourceName: '*' })];
  const statements: iam.PolicyStatement[] = [];

  // The per-instance scoping is real IAM: scale-up tags each config parameter with its
  // instance's ARN, and the statement ties that tag to the calling instance through the
  // `ec2:SourceInstanceARN` policy variable, which EC2 role credentials carry. The tag key is
  // `aws:ResourceTag/<key>`, the one the Service Authorization Reference lists on the rows of
  // ssm:GetParameter and ssm:DeleteParameter (`ssm:resourceTag/<key>` appears only in its
  // parameter resource-type table). Under IfExists a key the request lacks holds, so the key
  // must be one AWS documents for these actions. The path holds no pool: the ARN alone keeps
  // each pool's role (each instance) off the others' configs.
  statements.push(
    new iam.PolicyStatement({
      sid: 'ReadAndDeleteOwnRunnerConfig',
      actions: ['ssm:GetParameter', 'ssm:DeleteParameter'],
      resources: [configs],
      // IfExists: IAM sees no tags on a parameter that does not exist yet, and a waiting
      // instance must get ParameterNotFound there, not AccessDenied (the boot script tells
      // the two apart). Only scale-up can create parameters here, always with the tag.
      conditions: { StringEqualsIfExists: { [`aws:ResourceTag/${PARAMETER_INSTANCE_ARN_TAG}`]: '${ec2:SourceInstanceARN}' } },
    }),
  );
  // With IfExists, a parameter under the config path that lacks the ARN tag would be open to
  // every instance; the pool's eviction marker is such a parameter (tagged with the id only,
  // so no instance may read it). Deny what carries the id tag but not the ARN tag.
  statements.push(
    new iam.PolicyStatement({
      sid: 'NoUntaggedRunnerParameters',
      effect: iam.Effect.DENY,
      actions: ['ssm:GetParameter', 'ssm:DeleteParameter'],
      resources: [configs],
      conditions: {
        Null: {
          [`aws:ResourceTag/${PARAMETER_INSTANCE_TAG}`]: 'false',
          [`aws:ResourceTag/${PARAMETER_INSTANCE_ARN_TAG}`]: 'true',
        },
      },
    }),
  );
  if (options.encryptionKey) {
    statements.push(
      new iam.PolicyStatement({
        sid: 'DecryptRunnerConfigThroughSsm',
        actions: ['kms:Decrypt'],
        resources: [options.encryptionKey.keyArn],
        conditions: { StringEquals: { 'kms:ViaService': `ssm.${Aws.REGION}.amazonaws.com` } },
      }),
    );
  }
  // Self-termination: `aws:ARN` is the target instance's ARN; the pool tag keeps the grant
  // inside the role's pools even if that key's meaning ever changed (see docs/security.md).
  statements.push(
    new iam.PolicyStatement({
      sid: 'TerminateSelf',
      actions: ['ec2:TerminateInstances'],
      resources: ownInstances,
      conditions: { StringEquals: { 'aws:ARN': '${ec2:SourceInstanceARN}', ...ofItsPools } },
    }),
  );
  // The job-start report (templates/start-runner.sh, watch_job): this tag key only, on itself only.
  // ForAllValues holds for a request without tags too, hence the Null check on aws:TagKeys.
  statements.push(
    new iam.PolicyStatement({
      sid: 'TagOwnJobStart',
      actions: ['ec2:CreateTags'],
      resources: ownInstances,
      conditions: {
        StringEquals: { 'aws:ARN': '${ec2:SourceInstanceARN}', ...ofItsPools },
        'ForAllValues:StringEquals': { 'aws:TagKeys': [tags.jobStarted] },
        Null: { 'aws:TagKeys': 'false' },
      },
    }),
  );
  // The reason a cold launch failed before its runner started (on_exit, counted by the pool's
  // back-off), only while the instance has not reported a job: job code, which runs with this
  // role, cannot charge its own instance to the back-off once its job started.
  statements.push(
    new iam.PolicyStatement({
      sid: 'TagOwnStartFailure',
      actions: ['ec2:CreateTags'],
      resources: ownInstances,
      conditions: {
        StringEquals: { 'aws:ARN': '${ec2:SourceInstanceARN}', ...ofItsPools },
        'ForAllValues:StringEquals': { 'aws:TagKeys': [tags.startFailure] },
        Null: { 'aws:TagKeys': 'false', [`aws:ResourceTag/${tags.jobStarted}`]: 'true' },
      },
    }),
  );
  // Runner updates: the version an instance installed, on itself only (templates/install-runner.sh,
  // tag_version). Job code runs with this role and could rewrite it on its own instance: that
  // misleads the pool about that one instance only (kept or replaced for it), nothing else.
  statements.push(
    new iam.PolicyStatement({
      sid: 'TagOwnRunnerVersion',
      actions: ['ec2:CreateTags'],
      resources: ownInstances,
      conditions: {
        StringEquals: { 'aws:ARN': '${ec2:SourceInstanceARN}', ...ofItsPools },
        'ForAllValues:StringEquals': { 'aws:TagKeys': [tags.runnerVersion] },
        Null: { 'aws:TagKeys': 'false' },
      },
    }),
  );
  // A pool that follows the newest release reads its provider's resolved release at install time.
  // The fleet's extra CA certificates (templates/start-runner.sh, install_cas): GetParameter
  // alone, the boot's one call. Here rather than beside the parameter, so a role the stack
  // cannot change lists it among the statements its owner attaches.
  if (options.caParameterName) {
    statements.push(
      new iam.PolicyStatement({
        sid: 'ReadFleetCaCertificates',
        actions: ['ssm:GetParameter'],
        resources: [stack.formatArn({ service: 'ssm', resource: 'parameter', resourceName: options.caParameterName.slice(1) })],
      }),
    );
  }
  const followed = [...new Set(options.pools.filter((p) => followsLatestRunner(p)).map((p) => p.provider))];
  if (followed.length > 0) {
    statements.push(
      new iam.PolicyStatement({
        sid: 'ReadResolvedRunnerRelease',
        actions: ['ssm:GetParameter'],
        resources: followed.map((provider) => stack.formatArn({ service: 'ssm', resource: 'parameter', resourceName: paths.runnerRelease(provider).slice(1) })),
      }),
    );
  }
  statements.push(...parkingStatements(ownInstances, options.pools.filter((p) => p.reuse !== undefined).map((p) => p.name), tags));
  // The boot script ships its own log (no agent on the AMI): a stream per instance, created
  // by the instance, in this group only. `log-group:<name>:*` is the form IAM uses for
  // CreateLogStream and covers the group's streams for PutLogEvents (CloudWatch Logs user
  // guide, "Overview of managing access permissions"). Spelled out (not grantWrite, which
  // gives the same actions) so the statement is named and the permission tests can read it.
  // The group is the fleet's: a stream name (the instance id) cannot be tied to the caller.
  statements.push(
    new iam.PolicyStatement({
      sid: 'WriteOwnBootLog',
      actions: ['logs:CreateLogStream', 'logs:PutLogEvents'],
      resources: [
        stack.formatArn({ service: 'logs', resource: 'log-group', resourceName: `${bootLogGroupName(options.prefix)}:*`, arnFormat: ArnFormat.COLON_RESOURCE_NAME }),
      ],
    }),
  );
  return statements;
}

/**
 * Adds the instance statements to a role, with the reasons for its wildcards. False when the
 * role took none of them (an imported role marked immutable): its owner must attach them.
 */
export function grantInstance(role: iam.IRole, statements: iam.PolicyStatement[], prefix: string): boolean {
  const added = statements.map((s) => role.addToPrincipalPolicy(s).statementAdded);
  // An immutable role (`fromRoleArn(..., { mutable: false })`, `withoutPolicyUpdates()`) says
  // it added the statement and drops it; a role that took it holds a policy in its own tree.
  const holdsPolicy = role.node.findAll().some((c) => c instanceof iam.Policy || c instanceof iam.CfnPolicy);
  const paths = ssmPaths(prefix);
  acknowledgeWildcard(
    role,
    nagArn('ssm', `parameter${paths.runnerConfigRoot}*`),
    'Each instance reaches only the config parameter tagged with its own ARN (condition aws:ResourceTag = ${ec2:SourceInstanceARN}); instance ids are known only at run time.',
  );
  acknowledgeWildcard(
    role,
    nagArn('ec2', 'instance/*'),
    "An instance may terminate only itself and tag only itself with its job-start key, and an instance of a reusable pool untag and tag itself with its parking keys (condition aws:ARN = ${ec2:SourceInstanceARN}), only within the role's pools (their pool tag).",
  );
  acknowledgeWildcard(
    role,
    nagArn('logs', `log-group:${bootLogGroupName(prefix)}:*`),
    "The fleet's one boot log group: each instance writes a stream named after its instance id, known only at run time.",
  );
  return holdsPolicy && added.every((a) => a);
}

/**
 * Parking after a job (contract reuse.ts, step 4), for the instances of reusable pools only:
 * a role may serve several pools, so the pool tag's value narrows the grant to them. Each
 * instance on itself only (aws:ARN), only the keys parking writes (`parking` when its runner
 * ended; `uses`, `warm-standby` when it parks) and the keys it removes then (its
 * activation's; never `parking`, which the pool bounds a parking instance by). Never `affinity`: scale-up writes it, and candidates are ordered by it, so a
 * job (it runs with this role) that could write it could have its instance offered to another
 * repository's jobs (R1). What the job can still write costs at most a refused claim or a
 * longer life, bounded by maxAge and the pool's eviction (docs/security.md).
 */
function parkingStatements(ownInstances: string[], reusablePools: string[], tags: ReturnType<typeof tagKeys>): iam.PolicyStatement[] {
  if (reusablePools.length === 0) return [];
  const onItself = (keys: string[]) => ({
    StringEquals: { 'aws:ARN': '${ec2:SourceInstanceARN}', [`aws:ResourceTag/${tags.pool}`]: reusablePools },
    'ForAllValues:StringEquals': { 'aws:TagKeys': keys },
    Null: { 'aws:TagKeys': 'false' },
  });
  return [
    new iam.PolicyStatement({
      sid: 'TagOwnParking',
      actions: ['ec2:CreateTags'],
      resources: ownInstances,
      conditions: onItself([tags.parking, tags.uses, tags.warmStandby]),
    }),
    // Null on aws:TagKeys matters most here: a DeleteTags without keys removes every tag.
    new iam.PolicyStatement({
      sid: 'UntagOwnActivation',
      actions: ['ec2:DeleteTags'],
      resources: ownInstances,
      conditions: onItself([tags.activatedAt, tags.traceId, tags.jobId, tags.runnerId, tags.jobStarted, tags.idleSince]),
    }),
  ];
}
