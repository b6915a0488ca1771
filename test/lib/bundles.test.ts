import { execFileSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { bundleDirectory, BundledHandler } from '../../lib/bundled-function';
import { LAMBDA_ENV } from '../../lambdas/shared/contract';

// The bundles are what Lambda runs: load each in a clean Node process, as the runtime would,
// with only the environment the constructs set.
// The drain's two functions run two exports of one bundle (FleetDrain's exportName).
const exportsOf = (name: BundledHandler) => (name === BundledHandler.DRAIN ? ['onEvent', 'isComplete'] : ['handler']);

describe.each(Object.values(BundledHandler))('the %s bundle', (name) => {
  it('loads on its own and exports its handler functions', () => {
    const env = {
      PATH: process.env.PATH ?? '',
      AWS_REGION: 'eu-west-1',
      [LAMBDA_ENV.fleetConfigParameter]: '/warm-runners/fleet/config',
      [LAMBDA_ENV.jobsQueueUrl]: 'https://sqs.eu-west-1.amazonaws.com/111122223333/jobs.fifo',
      [LAMBDA_ENV.deadLetterQueueUrl]: 'https://sqs.eu-west-1.amazonaws.com/111122223333/dlq.fifo',
      [LAMBDA_ENV.instanceArnPrefix]: 'arn:aws:ec2:eu-west-1:111122223333:instance/',
      [LAMBDA_ENV.jobRecordTable]: 'warm-runners-job-records',
      [LAMBDA_ENV.scaleUpFunctionName]: 'warm-runners-scale-up',
    };
    const script = `const m = require(${JSON.stringify(bundleDirectory(name))} + '/index.js'); process.stdout.write(${JSON.stringify(exportsOf(name))}.map((e) => typeof m[e]).join(','))`;
    const out = execFileSync(process.execPath, ['-e', script], { env, cwd: '/' }).toString();
    expect(out).toBe(exportsOf(name).map(() => 'function').join(','));
  });
});
