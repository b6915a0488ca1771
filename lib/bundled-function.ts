import { Duration } from 'aws-cdk-lib';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as logs from 'aws-cdk-lib/aws-logs';
import { Construct } from 'constructs';
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { functionNetworkOf, grantVpcAccess } from './function-network';

/** The Lambda handlers this library ships, bundled by `scripts/bundle-lambdas.mjs` into assets/<value>/. */
export enum BundledHandler {
  /** Verifies and queues webhook deliveries. */
  WEBHOOK = 'webhook',
  /** Serves queued jobs. */
  SCALE_UP = 'scale-up',
  /** Keeps the warm pools at their targets. */
  POOL = 'pool',
  /** Reclaims finished, idle, stuck and orphaned resources. */
  SCALE_DOWN = 'scale-down',
  /** Drains the fleet when it is deleted (onEvent and isComplete of a custom resource). */
  DRAIN = 'drain',
  /** Redelivers failed webhook deliveries and queues jobs whose delivery never came. */
  RECONCILE = 'reconcile',
  /** Resolves the newest runner releases and watches GitHub's runner window. */
  RUNNER_RELEASE = 'runner-release',
  /** Long-polls the fleet's runner scale sets and asks scale-up for their runners (docs/scale-set.md). */
  SCALE_SET_LISTENER = 'scale-set-listener',
  /** Creates, updates and deletes the fleet's runner scale sets with the stack (a custom resource's onEvent). */
  SCALE_SET_RESOURCE = 'scale-set-resource',
}

/** The runtime every function is pinned to; the bundles target it. */
export const RUNTIME = lambda.Runtime.NODEJS_24_X;

/**
 * The bundle's directory. The library runs from source (lib/, under tsx or vitest) and
 * compiled (dist/lib/); assets/ sits at the package root in both cases.
 */
export function bundleDirectory(handler: BundledHandler): string {
  for (const root of [resolve(__dirname, '..'), resolve(__dirname, '..', '..')]) {
    const dir = join(root, 'assets', handler);
    if (existsSync(join(dir, 'index.js'))) return dir;
  }
  throw new Error(`the ${handler} bundle is missing from assets/: run "npm run build" (npm ci does it) before synth`);
}

/** Props of a `BundledFunction`. */
export interface BundledFunctionProps {
  /** Which of the bundled handlers the function runs. */
  readonly handler: BundledHandler;
  /**
   * The bundle's export the function runs.
   * @default 'handler'
   */
  readonly exportName?: string;
  /** The function's description (also its role's). */
  readonly description: string;
  /** The function's timeout. */
  readonly timeout: Duration;
  /**
   * Memory size in MB.
   * @default 256
   */
  readonly memorySize?: number;
  /** Environment variables. */
  readonly environment: Record<string, string>;
  /** Retention of the function's own log group. */
  readonly logRetention: logs.RetentionDays;
  /**
   * Reserved concurrency.
   * @default - unreserved
   */
  readonly reservedConcurrentExecutions?: number;
}

/** A function whose code is one of the prebuilt bundles, with its own log group and JSON logs. */
export class BundledFunction extends lambda.Function {
  readonly logGroupResource: logs.LogGroup;

  constructor(scope: Construct, id: string, props: BundledFunctionProps) {
    const logGroup = new logs.LogGroup(scope, `${id}Logs`, { retention: props.logRetention });
    // An own role with write access to its own log group only, instead of the managed
    // AWSLambdaBasicExecutionRole, which may write to every log group in the account.
    const role = new iam.Role(scope, `${id}Role`, {
      assumedBy: new iam.ServicePrincipal('lambda.amazonaws.com'),
      description: props.description,
    });
    logGroup.grantWrite(role);
    // The fleet's VPC and CA certificates (lib/function-network.ts), for every function alike.
    const network = functionNetworkOf(scope);
    if (network?.vpc) grantVpcAccess(role, network);
    super(scope, id, {
      role,
      runtime: RUNTIME,
      architecture: lambda.Architecture.ARM_64,
      code: lambda.Code.fromAsset(bundleDirectory(props.handler)),
      handler: `index.${props.exportName ?? 'handler'}`,
      description: props.description,
      timeout: props.timeout,
      memorySize: props.memorySize ?? 256,
      environment: { ...props.environment, ...network?.environment },
      ...(network?.vpc ? { vpc: network.vpc, securityGroups: network.securityGroups, ...(network.vpcSubnets ? { vpcSubnets: network.vpcSubnets } : {}) } : {}),
      ...(network && network.layers.length > 0 ? { layers: network.layers } : {}),
      logGroup,
      loggingFormat: lambda.LoggingFormat.JSON,
      ...(props.reservedConcurrentExecutions === undefined ? {} : { reservedConcurrentExecutions: props.reservedConcurrentExecutions }),
    });
    this.logGroupResource = logGroup;
  }
}
