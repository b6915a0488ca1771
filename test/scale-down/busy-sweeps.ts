import { EC2Client } from '@aws-sdk/client-ec2';
import { SSMClient } from '@aws-sdk/client-ssm';
import type { CiProvider, FleetConfig, Provider } from '../../lambdas/shared/contract';
import { createScaleDownHandler } from '../../lambdas/scale-down/handler';
import { AwsCaller } from '../../lambdas/shared/aws-call';
import type { FakeAws } from '../support/fake-aws';
import type { Lines } from '../support/fixtures';

const MINUTE = 60_000;

/**
 * The busy-runner tests' sweeps (busy-github, busy-gitlab): the scale-down against the fake
 * AWS and one provider, every 5 minutes from 31 minutes after the activation (past grace and
 * idle timeout). The clock goes on across calls within a test: a new one per test.
 */
export class BusySweeps {
  private clock = 0;

  constructor(private readonly deps: { readonly aws: FakeAws; readonly lines: Lines; readonly fleet: () => FleetConfig }) {}

  async run(provider: Provider, ci: CiProvider, count: number): Promise<void> {
    const { aws, lines, fleet } = this.deps;
    const sweep = createScaleDownHandler({
      ec2: new EC2Client({}),
      ssm: new SSMClient({}),
      aws: new AwsCaller({ sleep: async () => {}, timeoutMs: 2_000 }),
      loadConfig: async () => fleet(),
      providers: () => ({ [provider]: ci }),
      now: () => new Date(aws.now.getTime() + 31 * MINUTE + this.clock),
      sink: lines.sink,
    });
    for (let n = 0; n < count; n++) {
      await sweep();
      this.clock += 5 * MINUTE;
    }
  }
}
