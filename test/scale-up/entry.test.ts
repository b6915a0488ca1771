import { afterEach, describe, expect, it, vi } from 'vitest';
import { LAMBDA_ENV } from '../../lambdas/shared/contract';

// The entry point reads its environment at load (a Lambda cold start): a missing or bad
// value must fail there, with the variable's name, not at the first claim.
describe('scale-up entry point', () => {
  afterEach(() => {
    vi.unstubAllEnvs();
    vi.resetModules();
  });
  const base = () => {
    vi.stubEnv('AWS_REGION', 'us-east-1');
    vi.stubEnv(LAMBDA_ENV.jobsQueueUrl, 'https://sqs.local/jobs.fifo');
    vi.stubEnv(LAMBDA_ENV.deadLetterQueueUrl, 'https://sqs.local/jobs-dlq.fifo');
    vi.stubEnv(LAMBDA_ENV.jobRecordTable, 'warm-runners-job-records');
  };

  it('fails clearly without JOB_RECORD_TABLE', async () => {
    base();
    vi.stubEnv(LAMBDA_ENV.instanceArnPrefix, 'arn:aws:ec2:eu-west-1:111122223333:instance/');
    vi.stubEnv(LAMBDA_ENV.jobRecordTable, '');
    await expect(import('../../lambdas/scale-up/index.js')).rejects.toThrow(/environment variable JOB_RECORD_TABLE is not set/);
  });

  it('fails clearly without INSTANCE_ARN_PREFIX', async () => {
    base();
    vi.stubEnv(LAMBDA_ENV.instanceArnPrefix, '');
    await expect(import('../../lambdas/scale-up/index.js')).rejects.toThrow(/environment variable INSTANCE_ARN_PREFIX is not set/);
  });

  it('fails clearly on a malformed INSTANCE_ARN_PREFIX, and loads with a good one', async () => {
    base();
    vi.stubEnv(LAMBDA_ENV.instanceArnPrefix, 'arn:aws:ec2:eu-west-1:111122223333:instance');
    await expect(import('../../lambdas/scale-up/index.js')).rejects.toThrow(/instance ARN prefix "arn:aws:ec2:eu-west-1:111122223333:instance"/);
    vi.resetModules();
    vi.stubEnv(LAMBDA_ENV.instanceArnPrefix, 'arn:aws:ec2:eu-west-1:111122223333:instance/');
    const mod = await import('../../lambdas/scale-up/index.js');
    expect(typeof mod.handler).toBe('function');
  });
});
