import type { Template } from 'aws-cdk-lib/assertions';
import { BlockList, isIPv4 } from 'node:net';

/**
 * A small evaluator of identity-policy statements, enough to check what a synthesized role
 * may do: Allow statements with Action, Resource, policy variables and the condition
 * operators this library uses (StringEquals, StringLike, ArnLike, Null, IpAddress, NotIpAddress, and the set operator
 * ForAllValues:StringEquals over multivalued keys such as aws:TagKeys). It is deliberately
 * strict: an unknown operator throws instead of guessing.
 */
export interface Statement {
  readonly Effect: 'Allow' | 'Deny';
  readonly Action: string | string[];
  readonly Resource: string | string[];
  readonly Condition?: Record<string, Record<string, string | string[]>>;
}

export interface Request {
  readonly action: string;
  readonly resource: string;
  /** Condition keys present in the request context, with their values (a list for a multivalued key). */
  readonly context: Record<string, string | string[]>;
}

const list = <T>(v: T | T[]): T[] => (Array.isArray(v) ? v : [v]);

function glob(pattern: string, value: string): boolean {
  const re = new RegExp('^' + pattern.split('').map((c) => (c === '*' ? '.*' : c === '?' ? '.' : c.replace(/[.+^${}()|[\]\\/]/g, '\\$&'))).join('') + '$');
  return re.test(value);
}

function substitute(value: string, context: Record<string, string | string[]>): string | undefined {
  let missing = false;
  const out = value.replace(/\$\{([^}]+)\}/g, (_m, key: string) => {
    const v = context[key];
    if (typeof v === 'string') return v;
    missing = true;
    return '';
  });
  return missing ? undefined : out;
}

function conditionHolds(operator: string, key: string, expected: string[], context: Record<string, string | string[]>): boolean {
  const actual = context[key];
  if (operator.startsWith('ForAllValues:')) {
    // Every value of the request's set must match; an absent or empty set matches (IAM User
    // Guide, "Multivalued context keys"): pair it with a Null check.
    const inner = operator.slice('ForAllValues:'.length);
    return list(actual ?? []).every((v) => conditionHolds(inner, key, expected, { ...context, [key]: v }));
  }
  // Null asks only whether the key is present, multivalued or not.
  if (operator === 'Null') return expected.some((e) => (e === 'true') === (actual === undefined || (Array.isArray(actual) && actual.length === 0)));
  if (Array.isArray(actual)) throw new Error(`iam-eval: ${key} is multivalued; ${operator} needs ForAllValues`);
  if (operator.endsWith('IfExists')) {
    // The condition holds when the key is absent from the request context.
    return actual === undefined || conditionHolds(operator.slice(0, -'IfExists'.length), key, expected, context);
  }
  if (actual === undefined) return false;
  const values = expected.map((e) => substitute(e, context)).filter((e): e is string => e !== undefined);
  switch (operator) {
    case 'StringEquals':
      return values.includes(actual);
    case 'StringLike':
    case 'ArnLike':
      return values.some((v) => glob(v, actual));
    case 'IpAddress':
    case 'NotIpAddress': {
      const ranges = new BlockList();
      for (const v of values) {
        const [address, bits] = v.split('/') as [string, string | undefined];
        const family = isIPv4(address) ? 'ipv4' : 'ipv6';
        ranges.addSubnet(address, Number(bits ?? (family === 'ipv4' ? 32 : 128)), family);
      }
      const inside = ranges.check(actual, isIPv4(actual) ? 'ipv4' : 'ipv6');
      return operator === 'IpAddress' ? inside : !inside;
    }
    default:
      throw new Error(`iam-eval: unsupported condition operator ${operator}`);
  }
}

export function isAllowed(statements: readonly Statement[], request: Request): boolean {
  const matches = (s: Statement) =>
    list(s.Action).some((a) => glob(a, request.action)) &&
    list(s.Resource).some((r) => {
      const resource = substitute(r, request.context);
      return resource !== undefined && glob(resource, request.resource);
    }) &&
    Object.entries(s.Condition ?? {}).every(([operator, keys]) =>
      Object.entries(keys).every(([key, expected]) => conditionHolds(operator, key, list(expected), request.context)),
    );
  if (statements.some((s) => s.Effect === 'Deny' && matches(s))) return false;
  return statements.some((s) => s.Effect === 'Allow' && matches(s));
}

/** Replaces CloudFormation intrinsics of pseudo parameters with concrete values. */
export function resolvePseudo(value: unknown, pseudo: Record<string, string>): unknown {
  if (Array.isArray(value)) return value.map((v) => resolvePseudo(v, pseudo));
  if (value && typeof value === 'object') {
    const obj = value as Record<string, unknown>;
    if ('Ref' in obj && typeof obj.Ref === 'string') return pseudo[obj.Ref] ?? `<ref:${obj.Ref}>`;
    if ('Fn::Join' in obj) {
      const [sep, parts] = obj['Fn::Join'] as [string, unknown[]];
      return (resolvePseudo(parts, pseudo) as unknown[]).map(String).join(sep);
    }
    if ('Fn::GetAtt' in obj) return `<getatt:${(obj['Fn::GetAtt'] as string[]).join('.')}>`;
    return Object.fromEntries(Object.entries(obj).map(([k, v]) => [k, resolvePseudo(v, pseudo)]));
  }
  return value;
}

/** Every statement of the policies attached to the roles whose logical ids start with `roleLogicalIdPrefix`, pseudo parameters resolved. */
export function rolePolicyStatements(template: Template, roleLogicalIdPrefix: string, pseudo: Record<string, string>): Statement[] {
  const statements: Statement[] = [];
  for (const policy of Object.values(template.findResources('AWS::IAM::Policy')) as { Properties: Record<string, unknown> }[]) {
    const roles = (policy.Properties.Roles as { Ref: string }[]).map((r) => r.Ref);
    const document = policy.Properties.PolicyDocument as { Statement: unknown };
    if (roles.some((r) => r.startsWith(roleLogicalIdPrefix))) statements.push(...(resolvePseudo(document.Statement, pseudo) as Statement[]));
  }
  return statements;
}
