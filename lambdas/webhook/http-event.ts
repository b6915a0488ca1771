import type { APIGatewayProxyEvent, LambdaFunctionURLEvent } from 'aws-lambda';

/**
 * A delivery as the webhook's exposure hands it over (lib/webhook-exposure.ts): a Function URL
 * sends payload format 2.0, an API Gateway REST API's proxy integration format 1.0. Both carry
 * the headers, the body and its base64 flag alike; the path and the method sit apart.
 */
export type WebhookEvent = LambdaFunctionURLEvent | APIGatewayProxyEvent;

/**
 * The request path: 2.0's rawPath; 1.0's resource (`/github`, `/gitlab`: the API's own
 * resource, which `path` is not behind a custom domain, where it carries the mapping's base path).
 */
export function requestPath(event: WebhookEvent): string {
  return ('rawPath' in event ? event.rawPath : (event as APIGatewayProxyEvent).resource) ?? '/';
}

/** The HTTP method; POST when the event does not say (a test's bare event). */
export function requestMethod(event: WebhookEvent): string {
  if ('httpMethod' in event && event.httpMethod) return event.httpMethod;
  return (event as LambdaFunctionURLEvent).requestContext?.http?.method ?? 'POST';
}
