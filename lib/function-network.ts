import { Aws } from 'aws-cdk-lib';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import { Construct, type IConstruct } from 'constructs';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { acknowledgeWildcard, nagArn } from './nag';

/** Where the CA layer's PEM file lands in a function (layers are extracted under /opt). */
export const FUNCTION_CA_FILE = '/opt/cdk-warm-runners/ca-certificates.pem';

/**
 * The actions Lambda needs on the execution role to attach a function to a VPC: the actions of
 * the AWS managed AWSLambdaENIManagementAccess policy, inline instead of the managed policy
 * (the fleet's roles carry no managed policy), each narrowed by `grantVpcAccess`.
 */
export const VPC_ACCESS_ACTIONS = [
  'ec2:CreateNetworkInterface',
  'ec2:DescribeNetworkInterfaces',
  'ec2:DescribeSubnets',
  'ec2:DeleteNetworkInterface',
  'ec2:AssignPrivateIpAddresses',
  'ec2:UnassignPrivateIpAddresses',
];

/** Props of a `FunctionNetwork`. Internal: WarmRunners builds it from its own props. */
export interface FunctionNetworkProps {
  /**
   * The VPC the functions run in.
   * @default - no VPC: the functions reach AWS and the CI server through Lambda's own network
   */
  readonly vpc?: ec2.IVpc;
  /** Subnets of `vpc` the functions run in. @default - none: not in a VPC */
  readonly vpcSubnets?: ec2.SubnetSelection;
  /** Security groups of the functions. @default - one security group with egress only */
  readonly securityGroups?: ec2.ISecurityGroup[];
  /** Extra CA certificates (PEM) the functions trust. @default - Node's own roots only */
  readonly caCertificates?: string[];
}

/** What every `BundledFunction` under a scope gets: the VPC, the CA layer and its variable. */
export interface FunctionNetworkSettings {
  readonly vpc?: ec2.IVpc;
  readonly vpcSubnets?: ec2.SubnetSelection;
  readonly securityGroups?: ec2.ISecurityGroup[];
  readonly layers: lambda.ILayerVersion[];
  readonly environment: Record<string, string>;
}

const settingsByScope = new WeakMap<IConstruct, FunctionNetworkSettings>();

/**
 * The network settings of the nearest scope (itself or an ancestor) a `FunctionNetwork` was
 * created in; none outside a fleet. Every control-plane function is a `BundledFunction`, wherever
 * it is created (the fleet, the reconciler, the release resolver, the drain), so this one lookup
 * puts all of them in the fleet's VPC.
 */
export function functionNetworkOf(scope: IConstruct): FunctionNetworkSettings | undefined {
  for (const s of [...scope.node.scopes].reverse()) {
    const found = settingsByScope.get(s);
    if (found) return found;
  }
  return undefined;
}

/**
 * Puts the control-plane functions of its scope in a VPC and makes them trust extra CA
 * certificates (docs/private-network.md). Create it before the functions: each
 * `BundledFunction` created under the same scope afterwards takes its settings.
 */
export class FunctionNetwork extends Construct {
  /** The functions' connections (their security groups); absent when they run outside a VPC. */
  readonly connections?: ec2.Connections;
  /** The layer holding the PEM file `NODE_EXTRA_CA_CERTS` names; absent without certificates. */
  readonly caLayer?: lambda.LayerVersion;
  readonly settings: FunctionNetworkSettings;

  constructor(scope: Construct, id: string, props: FunctionNetworkProps) {
    super(scope, id);
    let securityGroups: ec2.ISecurityGroup[] | undefined;
    if (props.vpc) {
      // Lambda gives a function's interfaces no public address: in a public subnet it reaches neither AWS nor the internet.
      const publicIds = new Set(props.vpc.publicSubnets.map((s) => s.subnetId));
      const chosen = props.vpc.selectSubnets(props.vpcSubnets).subnetIds;
      if (chosen.some((id) => publicIds.has(id))) {
        throw new Error(
          'functionSubnets selects public subnets: Lambda gives functions no public address there, so they would reach neither AWS nor the CI server; select private subnets with a NAT, or with the VPC endpoints of docs/private-network.md',
        );
      }
      securityGroups =
        props.securityGroups && props.securityGroups.length > 0
          ? props.securityGroups
          : [new ec2.SecurityGroup(this, 'SecurityGroup', { vpc: props.vpc, description: 'Control-plane functions of a cdk-warm-runners fleet: egress only', allowAllOutbound: true })];
      this.connections = new ec2.Connections({ securityGroups });
    }
    const environment: Record<string, string> = {};
    const layers: lambda.ILayerVersion[] = [];
    if (props.caCertificates && props.caCertificates.length > 0) {
      this.caLayer = new lambda.LayerVersion(this, 'CaCertificates', {
        code: lambda.Code.fromAsset(caLayerDirectory(props.caCertificates)),
        description: 'Extra CA certificates of a cdk-warm-runners fleet (NODE_EXTRA_CA_CERTS)',
      });
      layers.push(this.caLayer);
      // Node reads it once, at process start (Node.js CLI docs, NODE_EXTRA_CA_CERTS): a variable set later would be ignored.
      environment.NODE_EXTRA_CA_CERTS = FUNCTION_CA_FILE;
    }
    this.settings = {
      ...(props.vpc ? { vpc: props.vpc, securityGroups: securityGroups! } : {}),
      ...(props.vpc && props.vpcSubnets ? { vpcSubnets: props.vpcSubnets } : {}),
      layers,
      environment,
    };
    settingsByScope.set(scope, this.settings);
  }
}

/**
 * Lets a role attach its function to a VPC (the ENI actions), each on what the Service
 * Authorization Reference lets it be scoped to, with the cdk-nag reasons. For the roles CDK
 * does not manage itself: a function given its own role gets no VPC policy.
 * - The Describe calls take no resource: `*`.
 * - CreateNetworkInterface authorizes the new interface (`network-interface/*`: its id is
 *   Lambda's, at run time), the subnet and the security groups: the functions' own only.
 * - Delete, Assign and Unassign act on an interface alone: `network-interface/*`, no condition.
 *   Lambda's guide warns against conditioning DeleteNetworkInterface: Lambda deletes the
 *   interfaces with the role's credentials, also after the function's configuration changed.
 */
export function grantVpcAccess(role: iam.IRole, network: FunctionNetworkSettings): void {
  const ec2Arn = (resource: string) => `arn:${Aws.PARTITION}:ec2:${Aws.REGION}:${Aws.ACCOUNT_ID}:${resource}`;
  const interfaces = ec2Arn('network-interface/*');
  const subnets = network.vpc!.selectSubnets(network.vpcSubnets).subnetIds.map((id) => ec2Arn(`subnet/${id}`));
  const groups = (network.securityGroups ?? []).map((g) => ec2Arn(`security-group/${g.securityGroupId}`));
  role.addToPrincipalPolicy(new iam.PolicyStatement({ sid: 'DescribeVpcForFunction', actions: ['ec2:DescribeNetworkInterfaces', 'ec2:DescribeSubnets'], resources: ['*'] }));
  role.addToPrincipalPolicy(new iam.PolicyStatement({ sid: 'CreateFunctionInterface', actions: ['ec2:CreateNetworkInterface'], resources: [interfaces, ...subnets, ...groups] }));
  role.addToPrincipalPolicy(
    new iam.PolicyStatement({ sid: 'ManageFunctionInterfaces', actions: ['ec2:DeleteNetworkInterface', 'ec2:AssignPrivateIpAddresses', 'ec2:UnassignPrivateIpAddresses'], resources: [interfaces] }),
  );
  acknowledgeWildcard(role, '*', 'ec2:DescribeNetworkInterfaces and ec2:DescribeSubnets, which Lambda calls to attach the function to the VPC, take no resource-level permissions.');
  acknowledgeWildcard(
    role,
    nagArn('ec2', 'network-interface/*'),
    "Lambda creates, deletes and re-addresses the function's network interfaces itself; their ids exist only at run time (creation is also bound to the functions' subnets and security groups).",
  );
}

/**
 * A directory holding the certificates as one PEM file at the layer path of FUNCTION_CA_FILE,
 * named by their digest: the same certificates give the same asset (no new layer version).
 */
function caLayerDirectory(certificates: string[]): string {
  const pem = `${caBundle(certificates)}\n`;
  const dir = join(tmpdir(), `cdk-warm-runners-ca-${createHash('sha256').update(pem).digest('hex').slice(0, 16)}`);
  const file = join(dir, FUNCTION_CA_FILE.replace(/^\/opt\//, ''));
  if (!existsSync(file)) {
    mkdirSync(join(file, '..'), { recursive: true });
    writeFileSync(file, pem);
  }
  return dir;
}

/** The PEM text a fleet's certificates are shipped as, to the functions and to the instances alike. */
export function caBundle(certificates: string[]): string {
  return certificates.map((c) => c.replace(/\r\n/g, '\n').trim()).join('\n');
}
