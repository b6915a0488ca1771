import { App, Duration, Stack } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { WarmRunners, type WarmRunnersProps } from '../../lib';
import { JOB_RETRY_DEFAULTS, LAMBDA_ENV, Provider } from '../../lambdas/shared/contract';

function synth(props: Partial<WarmRunnersProps> = {}) {
  const s = new Stack(new App(), 'Retry');
  const pools = [{ name: 'linux', provider: Provider.GITHUB, labels: ['linux'], machineImage: ec2.MachineImage.latestAmazonLinux2023() }];
  new WarmRunners(s, 'R', { vpc: new ec2.Vpc(s, 'Vpc'), github: { appId: '1', organization: 'o' }, pools, ...props });
  return s;
}

/** The retry options the scale-up function is given. */
function retryEnv(s: Stack): unknown {
  const fns = Template.fromStack(s).findResources('AWS::Lambda::Function');
  const scaleUp = Object.values(fns).find((f) => f.Properties.Environment?.Variables?.[LAMBDA_ENV.jobRecordTable] !== undefined);
  return JSON.parse(scaleUp!.Properties.Environment.Variables[LAMBDA_ENV.jobRetryOptions]);
}

describe('the job record grant', () => {
  it('allows exactly the DynamoDB calls the record code sends', () => {
    const source = readFileSync(join(__dirname, '..', '..', 'lambdas', 'scale-up', 'job-record.ts'), 'utf8');
    const sent = [...new Set([...source.matchAll(/new (\w+)Command\(/g)].map((m) => `dynamodb:${m[1]}`))].sort();
    expect(sent).toEqual(['dynamodb:DeleteItem', 'dynamodb:GetItem', 'dynamodb:UpdateItem']);
    const s = synth();
    const policies = Object.values(Template.fromStack(s).findResources('AWS::IAM::Policy'));
    const granted = policies.flatMap((p) => p.Properties.PolicyDocument.Statement as { Action: string | string[] }[]).flatMap((st) => [st.Action].flat()).filter((a) => a.startsWith('dynamodb:'));
    expect([...new Set(granted)].sort()).toEqual(sent);
  });
});

describe('jobRetryAfter and jobRetryLimit', () => {
  it('reach the scale-up function, with the contract defaults when absent', () => {
    expect(retryEnv(synth())).toEqual(JOB_RETRY_DEFAULTS);
    expect(retryEnv(synth({ jobRetryAfter: Duration.minutes(10), jobRetryLimit: 0 }))).toEqual({ retryAfterSeconds: 600, limit: 0 });
  });

  it('are validated with actionable messages', () => {
    expect(() => synth({ jobRetryAfter: Duration.seconds(30) })).toThrow(/jobRetryAfter 30 seconds must be from 1 minute to 12 hours/);
    expect(() => synth({ jobRetryAfter: Duration.hours(13) })).toThrow(/jobRetryAfter 13 hours must be from 1 minute to 12 hours/);
    expect(() => synth({ jobRetryLimit: 1.5 })).toThrow(/jobRetryLimit 1.5 must be an integer from 0 to 10/);
    expect(() => synth({ jobRetryLimit: 11 })).toThrow(/jobRetryLimit 11 must be an integer from 0 to 10/);
  });
});
