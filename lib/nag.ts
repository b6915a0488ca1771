import { Validations } from 'aws-cdk-lib';
import type { IConstruct } from 'constructs';

/**
 * Acknowledges a cdk-nag AwsSolutions-IAM5 finding (wildcard resource) on the one construct
 * that carries it, with the reason a reviewer needs. `resource` is written as cdk-nag prints
 * it: pseudo parameters as <AWS::Region>, the fleet's paths in full.
 */
export function acknowledgeWildcard(scope: IConstruct, resource: string, reason: string): void {
  Validations.of(scope).acknowledge({ id: `AwsSolutions::AwsSolutions-IAM5[Resource::${resource}]`, reason });
}

/** An ARN in the form cdk-nag reports it (region, account and partition left as placeholders). */
export function nagArn(service: string, resource: string): string {
  return `arn:<AWS::Partition>:${service}:<AWS::Region>:<AWS::AccountId>:${resource}`;
}

/** Acknowledges a cdk-nag AwsSolutions-IAM4 finding (AWS managed policy) on the role that carries it. */
export function acknowledgeManagedPolicy(scope: IConstruct, policyName: string, reason: string): void {
  Validations.of(scope).acknowledge({ id: `AwsSolutions::AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/${policyName}]`, reason });
}
