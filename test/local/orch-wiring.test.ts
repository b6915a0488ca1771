import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { JOB_RETRY_DEFAULTS, LAMBDA_ENV, type JobRetryOptions } from '../../lambdas/shared/contract';
import { DynamoLaunchTickets } from '../../lambdas/shared/launch-tickets';
import { LocalLambdas } from '../../local/lambdas';

/**
 * The sandbox builds the pool and scale-up with what the deployed entry points
 * (lambdas/pool/index.ts, lambdas/scale-up/index.ts) give them: both factories are replaced
 * here by ones that keep the dependencies they are handed, the deployed modules are loaded
 * with the environment the construct sets, and the two sets of dependencies are compared. A
 * dependency the deployed function gets (the launch tickets, say) and the sandbox's does not
 * fails here, so `npm run local` cannot silently run without it.
 */

const built = vi.hoisted(() => ({ pool: [] as Record<string, unknown>[], scaleUp: [] as Record<string, unknown>[] }));
vi.mock('../../lambdas/pool/handler', async (original) => ({
  ...(await original<object>()),
  createPoolHandler: (deps: Record<string, unknown>) => {
    built.pool.push(deps);
    return async () => [];
  },
}));
vi.mock('../../lambdas/scale-up/handler', async (original) => ({
  ...(await original<object>()),
  createScaleUpHandler: (deps: Record<string, unknown>) => {
    built.scaleUp.push(deps);
    return async () => ({ batchItemFailures: [] });
  },
}));

const TABLE = 'deployed-job-records';
const ENV = {
  [LAMBDA_ENV.jobRecordTable]: TABLE,
  [LAMBDA_ENV.jobsQueueUrl]: 'https://sqs.us-east-1.amazonaws.com/123456789012/jobs.fifo',
  [LAMBDA_ENV.deadLetterQueueUrl]: 'https://sqs.us-east-1.amazonaws.com/123456789012/dlq.fifo',
  [LAMBDA_ENV.instanceArnPrefix]: 'arn:aws:ec2:us-east-1:123456789012:instance/',
  AWS_REGION: 'us-east-1',
};
const saved: Record<string, string | undefined> = {};

/**
 * What the sandbox sets that the deployed entry points leave to the handlers' defaults: its
 * clock (the harness moves the pool's), its log sink (the report reads it), and scale-up's
 * queue and ARN settings the deployed module reads from its environment.
 */
const SANDBOX_ONLY = new Set(['now', 'sink', 'logs']);
/** Deployed, and in the sandbox only with the lossy faults (`jobRetry`): a retry check would hold the queue for the deployed 5 minutes. */
const LOSSY_ONLY = new Set(['jobRecords', 'options']);

let deployed: { pool: Record<string, unknown>; scaleUp: Record<string, unknown> };

beforeAll(async () => {
  for (const [k, v] of Object.entries(ENV)) {
    saved[k] = process.env[k];
    process.env[k] = v;
  }
  await import('../../lambdas/pool/index.js');
  await import('../../lambdas/scale-up/index.js');
  deployed = { pool: built.pool.at(-1)!, scaleUp: built.scaleUp.at(-1)! };
});
afterAll(() => {
  for (const [k, v] of Object.entries(saved)) {
    if (v === undefined) delete process.env[k];
    else process.env[k] = v;
  }
});

function sandbox(jobRetry?: JobRetryOptions): { pool: Record<string, unknown>; scaleUp: Record<string, unknown> } {
  built.pool.length = 0;
  built.scaleUp.length = 0;
  new LocalLambdas({
    endpoint: 'http://127.0.0.1:9',
    fleetConfigParameter: '/cwr/fleet/config',
    queueUrl: 'http://127.0.0.1:9/123456789012/jobs.fifo',
    deadLetterQueueUrl: 'http://127.0.0.1:9/123456789012/dlq.fifo',
    instanceArnPrefix: 'arn:aws:ec2:us-east-1:123456789012:instance/',
    onEvent: () => undefined,
    sweepGraceSeconds: 30,
    jobRecordTable: 'cwr-job-records',
    ...(jobRetry ? { jobRetry } : {}),
  });
  return { pool: built.pool[0]!, scaleUp: built.scaleUp[0]! };
}

const keys = (deps: Record<string, unknown>) => Object.keys(deps).filter((k) => deps[k] !== undefined);
const missing = (deps: Record<string, unknown>, of: Record<string, unknown>, allowed: ReadonlySet<string> = new Set()) =>
  keys(of).filter((k) => !(k in deps) && !allowed.has(k));

describe('the sandbox wires the pool and scale-up as the deployed entry points do', () => {
  it('the deployed functions take launch tickets in the job-record table (the premise)', () => {
    expect(deployed.pool.launchTickets).toBeInstanceOf(DynamoLaunchTickets);
    expect(deployed.scaleUp.launchTickets).toBeInstanceOf(DynamoLaunchTickets);
    expect(deployed.pool.launchTickets).toMatchObject({ tableName: TABLE });
    expect(deployed.scaleUp.launchTickets).toMatchObject({ tableName: TABLE });
  });

  it('the sandbox\'s pool and scale-up take theirs in its job-record table, with their own AwsCaller', () => {
    const local = sandbox();
    for (const deps of [local.pool, local.scaleUp]) {
      expect(deps.launchTickets).toBeInstanceOf(DynamoLaunchTickets);
      expect(deps.launchTickets).toMatchObject({ tableName: 'cwr-job-records', aws: deps.aws });
    }
  });

  it('lacks no dependency the deployed pool has', () => {
    expect(missing(sandbox().pool, deployed.pool)).toEqual([]);
  });

  it('lacks no dependency the deployed scale-up has but the lossy run\'s records and retry, which it has with them', () => {
    expect(missing(sandbox().scaleUp, deployed.scaleUp, LOSSY_ONLY)).toEqual([]);
    const lossy = sandbox({ ...JOB_RETRY_DEFAULTS, retryAfterSeconds: 8 }).scaleUp;
    expect(missing(lossy, deployed.scaleUp)).toEqual([]);
    expect(lossy.jobRecords).toMatchObject({ tableName: 'cwr-job-records' });
  });

  it('adds nothing the deployed functions lack but its clock and log sink', () => {
    const local = sandbox({ ...JOB_RETRY_DEFAULTS, retryAfterSeconds: 8 });
    expect(missing(deployed.pool, local.pool, SANDBOX_ONLY)).toEqual([]);
    expect(missing(deployed.scaleUp, local.scaleUp, SANDBOX_ONLY)).toEqual([]);
  });
});
