import { Validations } from 'aws-cdk-lib';
import * as apigateway from 'aws-cdk-lib/aws-apigateway';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as logs from 'aws-cdk-lib/aws-logs';
import type { Construct } from 'constructs';

/** Props of `WebhookExposure.apiGateway`. */
export interface ApiGatewayWebhookProps {
  /**
   * The source ranges (IPv4 or IPv6 CIDRs) allowed to call the webhook; every other source is
   * denied by the API's resource policy (`aws:SourceIp`). For GitHub, the `hooks` list of
   * https://api.github.com/meta (it changes now and then: refresh it on deploy); for GitLab, the
   * addresses your GitLab sends hooks from.
   */
  readonly allowedSourceRanges: string[];
}

/** How a webhook exposure is realised (`WebhookExposure.kind`). */
export enum WebhookExposureKind {
  /** A public Lambda Function URL. */
  FUNCTION_URL = 'function-url',
  /** A regional API Gateway REST API whose resource policy allows listed source ranges only. */
  API_GATEWAY = 'api-gateway',
  /** No endpoint: the reconciler alone finds jobs. */
  NONE = 'none',
}

/**
 * How GitHub and GitLab reach the webhook function (docs/private-network.md, "Webhook exposure").
 */
export class WebhookExposure {
  /** A public Function URL, unauthenticated at the URL (the function verifies each delivery's signature or token). The default. */
  static functionUrl(): WebhookExposure {
    return new WebhookExposure(WebhookExposureKind.FUNCTION_URL, []);
  }

  /**
   * A regional API Gateway REST API in front of the function, whose resource policy denies
   * every source address outside `allowedSourceRanges`; access logs on.
   */
  static apiGateway(props: ApiGatewayWebhookProps): WebhookExposure {
    return new WebhookExposure(WebhookExposureKind.API_GATEWAY, [...props.allowedSourceRanges]);
  }

  /**
   * No endpoint at all: jobs are found by the reconciler alone, one `reconcileInterval` (5
   * minutes by default) plus the 2 minutes a job must have waited, later than by a delivery.
   */
  static none(): WebhookExposure {
    return new WebhookExposure(WebhookExposureKind.NONE, []);
  }

  private constructor(
    /** Which exposure. */
    readonly kind: WebhookExposureKind,
    /** The allowed source ranges (API Gateway only; empty otherwise). */
    readonly allowedSourceRanges: string[],
  ) {}
}

/** Why the source ranges of `WebhookExposure.apiGateway` are refused, or undefined. `where` names the prop. */
export function sourceRangesProblem(ranges: string[], where: string): string | undefined {
  if (ranges.length === 0) return `${where} is empty: list the source ranges allowed to call the webhook (for GitHub, the "hooks" list of https://api.github.com/meta)`;
  for (const [i, range] of ranges.entries()) {
    if (!isCidr(range)) return `${where}[${i}] "${range}" is not an IPv4 or IPv6 CIDR (such as 192.30.252.0/22 or 2a0a:a440::/29)`;
    if (/\/0$/.test(range)) return `${where}[${i}] "${range}" allows every address: use WebhookExposure.functionUrl() for a public endpoint, or list the senders' ranges`;
  }
  return undefined;
}

function isCidr(range: string): boolean {
  const v4 = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})\/(\d{1,2})$/.exec(range);
  if (v4) return v4.slice(1, 5).every((o) => Number(o) <= 255 && String(Number(o)) === o) && Number(v4[5]) <= 32;
  const v6 = /^([0-9a-fA-F:]+)\/(\d{1,3})$/.exec(range);
  if (!v6 || Number(v6[2]) > 128) return false;
  const address = v6[1]!;
  const halves = address.split('::');
  if (halves.length > 2) return false;
  const groups = halves.flatMap((h) => (h === '' ? [] : h.split(':')));
  if (!groups.every((g) => /^[0-9a-fA-F]{1,4}$/.test(g))) return false;
  return halves.length === 2 ? groups.length < 8 : groups.length === 8;
}

/** What an exposure created: the base URL to append "github" or "gitlab" to, and its parts. */
export interface ExposedWebhook {
  /** Base URL ending in "/"; absent for `none()`. */
  readonly endpoint?: string;
  readonly functionUrl?: lambda.FunctionUrl;
  readonly api?: apigateway.RestApi;
}

/** Realises `exposure` for the webhook function (paths /github and /gitlab). */
export function exposeWebhook(scope: Construct, fn: lambda.Function, exposure: WebhookExposure, logRetention: logs.RetentionDays): ExposedWebhook {
  if (exposure.kind === WebhookExposureKind.NONE) return {};
  if (exposure.kind === WebhookExposureKind.FUNCTION_URL) {
    const functionUrl = fn.addFunctionUrl({ authType: lambda.FunctionUrlAuthType.NONE });
    return { endpoint: functionUrl.url, functionUrl };
  }
  const accessLogs = new logs.LogGroup(scope, 'WebhookApiAccessLogs', { retention: logRetention });
  const invoke = (effect: iam.Effect, conditions?: Record<string, unknown>) =>
    new iam.PolicyStatement({ effect, principals: [new iam.AnyPrincipal()], actions: ['execute-api:Invoke'], resources: ['execute-api:/*'], ...(conditions ? { conditions } : {}) });
  const api = new apigateway.RestApi(scope, 'WebhookApi', {
    description: 'Verifies GitHub and GitLab webhook deliveries from the allowed source ranges and queues the jobs',
    endpointTypes: [apigateway.EndpointType.REGIONAL],
    // An explicit Deny wins over the Allow: a source outside the list is refused before the function runs.
    policy: new iam.PolicyDocument({ statements: [invoke(iam.Effect.ALLOW), invoke(iam.Effect.DENY, { NotIpAddress: { 'aws:SourceIp': exposure.allowedSourceRanges } })] }),
    // No account-wide CloudWatch role (AWS::ApiGateway::Account is one per account and region: not a library's to set).
    cloudWatchRole: false,
    deployOptions: {
      stageName: 'webhook',
      accessLogDestination: new apigateway.LogGroupLogDestination(accessLogs),
      accessLogFormat: apigateway.AccessLogFormat.jsonWithStandardFields(),
    },
  });
  const integration = new apigateway.LambdaIntegration(fn, { allowTestInvoke: false });
  for (const path of ['github', 'gitlab']) api.root.addResource(path).addMethod('POST', integration);
  const reasons = {
    auth: 'GitHub and GitLab cannot sign requests for IAM, a Cognito pool or an authorizer: each delivery is authenticated by the function, which verifies its HMAC signature (GitHub) or token (GitLab) in constant time before anything else; the resource policy admits the listed source ranges only.',
    waf: 'The resource policy admits the listed source ranges only; a WAF web ACL adds cost a fleet may not need. Associate one with the stage if your account requires it.',
    execLogs: 'Execution logging needs the account-wide API Gateway CloudWatch role (AWS::ApiGateway::Account, one per account and region), which a library must not overwrite; access logs are on (JSON, the fleet\'s retention).',
    validation: 'The function validates every request itself: the body against its signature and size limit, the path and the headers; a request model would only duplicate that.',
  };
  Validations.of(api).acknowledge(
    { id: 'AwsSolutions::AwsSolutions-APIG2', reason: reasons.validation },
    { id: 'AwsSolutions::AwsSolutions-APIG3', reason: reasons.waf },
    { id: 'AwsSolutions::AwsSolutions-APIG4', reason: reasons.auth },
    { id: 'AwsSolutions::AwsSolutions-APIG6', reason: reasons.execLogs },
    { id: 'AwsSolutions::AwsSolutions-COG4', reason: reasons.auth },
  );
  return { endpoint: api.url, api };
}
