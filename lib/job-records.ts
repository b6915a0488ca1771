import { RemovalPolicy, Validations } from 'aws-cdk-lib';
import * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import * as iam from 'aws-cdk-lib/aws-iam';
import { Construct } from 'constructs';
import { JOB_RECORD_ATTRIBUTES, LAUNCH_TICKET_KEY_PREFIX, SCALE_SET_LEASE_KEY_PREFIX } from '../lambdas/shared/contract';

/**
 * The per-job records scale-up writes before it registers a runner (one item per job, which
 * delivery serves it), so a late copy of a job (a redelivery, a job the reconciler found)
 * launches nothing; and the prime back-off's launch tickets (scale-up and the pool Lambda). On-demand: a burst of jobs is a burst of writes, with no capacity to plan.
 */
export class JobRecords extends Construct {
  /** The table (key `jobId`, TTL attribute `expiresAt`). */
  readonly table: dynamodb.Table;

  constructor(scope: Construct, id: string) {
    super(scope, id);
    this.table = new dynamodb.Table(this, 'Resource', {
      partitionKey: { name: JOB_RECORD_ATTRIBUTES.key, type: dynamodb.AttributeType.STRING },
      billingMode: dynamodb.BillingMode.PAY_PER_REQUEST,
      timeToLiveAttribute: JOB_RECORD_ATTRIBUTES.expiresAt,
      // Records live four days and are rebuilt by the next delivery: nothing to keep after `cdk destroy`.
      removalPolicy: RemovalPolicy.DESTROY,
    });
    Validations.of(this.table).acknowledge({
      id: 'AwsSolutions::AwsSolutions-DDB3',
      reason: 'Point-in-time recovery would restore records that expire within four days and that the next delivery of a job writes again; nothing in the table is worth restoring.',
    });
  }

  /**
   * The conditional updates of a claim, a served mark, a retry and a release (a dead-lettered
   * job's record emptied to a tombstone), the consistent read that resolves a lost answer, and
   * the conditional delete of a stray retry check's record and of a launch ticket: nothing
   * else (no scan, no query).
   */
  grantClaim(grantee: iam.IGrantable): iam.Grant {
    return this.grantItemWrites(grantee);
  }

  /**
   * The launch tickets of the prime back-off (lambdas/shared/launch-tickets.ts), for the pool
   * Lambda: the conditional update that takes one, the consistent read that resolves a lost
   * answer, the conditional delete that gives one back. The same three actions as a claim, on
   * launch-ticket keys only: the pool never touches a job's record.
   */
  grantLaunchTickets(grantee: iam.IGrantable): iam.Grant {
    return iam.Grant.addToPrincipal({
      grantee,
      actions: ['dynamodb:UpdateItem', 'dynamodb:GetItem', 'dynamodb:DeleteItem'],
      resourceArns: [this.table.tableArn],
      conditions: { 'ForAllValues:StringLike': { 'dynamodb:LeadingKeys': [`${LAUNCH_TICKET_KEY_PREFIX}*`] } },
    });
  }

  /**
   * The scale-set listener's leases (contract scale-set.ts, lambdas/scale-set-listener/lease.ts):
   * the conditional updates that take, renew, record and release a lease, and the consistent
   * read that resolves a lost answer; on lease keys only, never a job's record or a launch
   * ticket. No PutItem or DeleteItem: the listener never writes a whole item nor removes one.
   */
  grantScaleSetLeases(grantee: iam.IGrantable): iam.Grant {
    return iam.Grant.addToPrincipal({
      grantee,
      actions: ['dynamodb:GetItem', 'dynamodb:UpdateItem'],
      resourceArns: [this.table.tableArn],
      conditions: { 'ForAllValues:StringLike': { 'dynamodb:LeadingKeys': [`${SCALE_SET_LEASE_KEY_PREFIX}*`] } },
    });
  }

  /**
   * The scale-set resource's clean-up of a scale set it deletes (lambdas/scale-set-resource):
   * it reads the lease item for the session to end, and deletes the item; on lease keys only.
   */
  grantScaleSetLeaseCleanup(grantee: iam.IGrantable): iam.Grant {
    return iam.Grant.addToPrincipal({
      grantee,
      actions: ['dynamodb:GetItem', 'dynamodb:DeleteItem'],
      resourceArns: [this.table.tableArn],
      conditions: { 'ForAllValues:StringLike': { 'dynamodb:LeadingKeys': [`${SCALE_SET_LEASE_KEY_PREFIX}*`] } },
    });
  }

  private grantItemWrites(grantee: iam.IGrantable): iam.Grant {
    return iam.Grant.addToPrincipal({ grantee, actions: ['dynamodb:UpdateItem', 'dynamodb:GetItem', 'dynamodb:DeleteItem'], resourceArns: [this.table.tableArn] });
  }
}
