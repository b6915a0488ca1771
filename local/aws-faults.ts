import { EC2ServiceException, type EC2Client } from '@aws-sdk/client-ec2';

/**
 * Faults moto cannot produce, injected as SDK middleware on one client (scale-up's EC2
 * client), so the handler meets them exactly where a real answer would arrive: after its
 * own pacing and retries, as an SDK service exception.
 */
export interface StartRefusal {
  /** The instance whose starts EC2 refuses (the first one scale-up tried to start), once chosen. */
  readonly instanceId: () => string | undefined;
  /** How many StartInstances calls were refused. */
  readonly refused: () => number;
  readonly remove: () => void;
}

/**
 * EC2 out of capacity for one instance: the first instance scale-up starts becomes the
 * victim, and every StartInstances that includes it is refused as a whole, as EC2 refuses a
 * request with one failing instance, with `InsufficientInstanceCapacity`, which EC2 documents
 * as a server error (HTTP 500). The other instances of a refused batch start when scale-up
 * retries them without the victim.
 */
export function refuseStartOfOneInstance(ec2: EC2Client, onRefused?: (instanceId: string) => void): StartRefusal {
  let victim: string | undefined;
  let refused = 0;
  const name = 'local-fault-refuse-start';
  ec2.middlewareStack.add(
    (next, context) => async (args) => {
      if (context.commandName === 'StartInstancesCommand') {
        const ids = ((args.input as { InstanceIds?: string[] }).InstanceIds ?? []).filter(Boolean);
        victim ??= ids[0];
        if (victim !== undefined && ids.includes(victim)) {
          refused++;
          onRefused?.(victim);
          throw new EC2ServiceException({
            name: 'InsufficientInstanceCapacity',
            $fault: 'server',
            $metadata: { httpStatusCode: 500, requestId: `local-${refused}` },
            message: `We currently do not have sufficient capacity for instance ${victim} (local fault).`,
          });
        }
      }
      return next(args);
    },
    { step: 'initialize', name },
  );
  return {
    instanceId: () => victim,
    refused: () => refused,
    remove: () => {
      ec2.middlewareStack.remove(name);
    },
  };
}
