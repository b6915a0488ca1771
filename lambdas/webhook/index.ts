import { SQSClient } from '@aws-sdk/client-sqs';
import { SSMClient } from '@aws-sdk/client-ssm';
import { createWebhookHandler } from './handler';

/**
 * Lambda Function URL handler (payload format 2.0) for `/github` and `/gitlab`. The clients,
 * the secret cache and the CI providers live as long as the container.
 */
export const handler = createWebhookHandler({
  ssm: new SSMClient({ maxAttempts: 2 }),
  sqs: new SQSClient({ maxAttempts: 3 }),
});
