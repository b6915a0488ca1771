import { Stack, Token } from 'aws-cdk-lib';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as iam from 'aws-cdk-lib/aws-iam';
import type { IConstruct } from 'constructs';
import type { RunnerPoolProps } from './props';

/** Where a pool's instances run and with what identity, before its launch template exists. */
export interface PoolInstances {
  readonly role: iam.IRole;
  readonly securityGroups: ec2.ISecurityGroup[];
  readonly subnetIds: string[];
  /** Whether the role and the security groups are the fleet's shared ones. */
  readonly sharedRole: boolean;
  readonly sharedSecurityGroup: boolean;
}

/** The fleet's shared defaults a pool falls back to. */
export interface FleetDefaults {
  readonly vpc: ec2.IVpc;
  readonly vpcSubnets?: ec2.SubnetSelection;
  readonly role: iam.IRole;
  readonly securityGroup: ec2.ISecurityGroup;
}

/**
 * A pool's role, security groups and subnets: its own where it sets them, else the fleet's.
 * Refuses what would fail after deploy (a role EC2 cannot assume, or of another account, which
 * no instance profile can hold; no security group; a selection of no subnet), naming the prop.
 */
export function poolInstances(scope: IConstruct, pool: RunnerPoolProps, index: number, fleet: FleetDefaults): PoolInstances {
  const where = (prop: string) => `pools[${index}].${prop} (pool "${pool.name}")`;
  const role = pool.instanceRole ?? fleet.role;
  if (pool.instanceRole) {
    const problem = instanceRoleProblem(scope, pool.instanceRole);
    if (problem) throw new Error(`${where('instanceRole')} ${problem}`);
  }
  if (pool.securityGroups !== undefined && pool.securityGroups.length === 0) {
    throw new Error(`${where('securityGroups')} is empty: give at least one security group, or leave it unset for the fleet's shared one`);
  }
  const securityGroups = pool.securityGroups ?? [fleet.securityGroup];
  let subnetIds: string[];
  const selection = pool.vpcSubnets ?? fleet.vpcSubnets ?? { subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS };
  const prop = pool.vpcSubnets ? where('vpcSubnets') : 'vpcSubnets';
  try {
    subnetIds = fleet.vpc.selectSubnets(selection).subnetIds;
  } catch (e) {
    throw new Error(`${prop} selects no subnet of the fleet's VPC: ${(e as Error).message}`);
  }
  if (subnetIds.length === 0) throw new Error(`${prop} selects no subnet of the fleet's VPC: the pool could launch nowhere; select at least one subnet`);
  return { role, securityGroups, subnetIds, sharedRole: pool.instanceRole === undefined, sharedSecurityGroup: pool.securityGroups === undefined };
}

/**
 * What keeps a role from serving as an instance role, where synth can see it: the trust policy
 * of a role defined in the app, and the account of an imported one (an instance profile holds
 * a role of its own account only).
 */
function instanceRoleProblem(scope: IConstruct, role: iam.IRole): string | undefined {
  const stack = Stack.of(scope);
  if (role instanceof iam.Role) {
    const trust = JSON.stringify(stack.resolve(role.assumeRolePolicy?.toJSON() ?? {}));
    if (!/"ec2\.amazonaws\.com"|"ec2\."/.test(trust)) {
      return "is not assumable by ec2.amazonaws.com, so no instance could use it: create it with assumedBy: new iam.ServicePrincipal('ec2.amazonaws.com')";
    }
    return undefined;
  }
  const account = role.env.account;
  if (!Token.isUnresolved(account) && !Token.isUnresolved(stack.account) && account !== stack.account) {
    return `is a role of account ${account}, but the fleet's stack deploys to ${stack.account}: an instance profile holds a role of its own account only`;
  }
  return undefined;
}

/**
 * One pool's instances, for the CDK verbs: `bucket.grantRead(runners.pool('deploy'))` grants
 * to its role, `runners.pool('deploy').connections.allowTo(db, ec2.Port.tcp(5432))` opens its
 * security groups. A pool without its own `instanceRole` (`securityGroups`) has the fleet's
 * shared one: a grant (a rule) through it reaches every pool that shares it.
 */
export class RunnerPool implements iam.IGrantable, ec2.IConnectable {
  /** @internal */
  static _of(name: string, instances: PoolInstances, launchTemplate: ec2.LaunchTemplate, instanceStatements: iam.PolicyStatement[]): RunnerPool {
    return new RunnerPool(name, instances, launchTemplate, instanceStatements);
  }

  /** The pool's name. */
  readonly name: string;
  /** Role of the pool's instances: its `instanceRole`, else the fleet's shared role. */
  readonly role: iam.IRole;
  readonly grantPrincipal: iam.IPrincipal;
  /** Whether `role` is the fleet's shared role (the pool sets no `instanceRole`). */
  readonly sharesFleetRole: boolean;
  /** Security groups of the pool's instances: its `securityGroups`, else the fleet's shared one. */
  readonly securityGroups: ec2.ISecurityGroup[];
  readonly connections: ec2.Connections;
  /** Whether `securityGroups` is the fleet's shared one (the pool sets no `securityGroups`). */
  readonly sharesFleetSecurityGroup: boolean;
  /** Subnets the control plane launches the pool's instances in. */
  readonly subnetIds: string[];
  /** The pool's launch template (instance profile of `role`, `securityGroups`, the boot script). */
  readonly launchTemplate: ec2.LaunchTemplate;
  /**
   * The grants the pool's instances need for their own calls, as the construct adds them to
   * `role`; attach them yourself to a role imported with `mutable: false`.
   */
  readonly instanceStatements: iam.PolicyStatement[];

  private constructor(name: string, instances: PoolInstances, launchTemplate: ec2.LaunchTemplate, instanceStatements: iam.PolicyStatement[]) {
    this.name = name;
    this.role = instances.role;
    this.grantPrincipal = instances.role;
    this.sharesFleetRole = instances.sharedRole;
    this.securityGroups = instances.securityGroups;
    this.connections = new ec2.Connections({ securityGroups: instances.securityGroups });
    this.sharesFleetSecurityGroup = instances.sharedSecurityGroup;
    this.subnetIds = instances.subnetIds;
    this.launchTemplate = launchTemplate;
    this.instanceStatements = instanceStatements;
  }
}
