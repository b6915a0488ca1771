import * as ssm from 'aws-cdk-lib/aws-ssm';
import type { Construct } from 'constructs';
import { createHash, X509Certificate } from 'node:crypto';
import { GitLabRunnerType, Provider, ssmPaths } from '../lambdas/shared/contract';
import { caBundle } from './function-network';
import { sourceRangesProblem, WebhookExposureKind } from './webhook-exposure';
import type { WarmRunnersProps } from './warm-runners';

/** The most an SSM String parameter holds (advanced tier); the instances read the certificates from one. */
const CA_PARAMETER_MAX_CHARS = 8192;

const PEM_BLOCK = /-----BEGIN ([A-Z0-9 ]+)-----\r?\n([A-Za-z0-9+/=\r\n]+?)-----END \1-----/g;

/** Why `pem` is refused (one or more CERTIFICATE blocks that parse, nothing else), or undefined. Never echoes the text: it may be a key pasted by mistake. */
export function caCertificateProblem(pem: string, where: string): string | undefined {
  const blocks = [...pem.matchAll(PEM_BLOCK)];
  const rest = pem.replace(PEM_BLOCK, '').trim();
  if (blocks.length === 0) return `${where} holds no PEM certificate: give one or more "-----BEGIN CERTIFICATE-----" blocks`;
  const other = blocks.filter((b) => b[1] !== 'CERTIFICATE').map((b) => `-----BEGIN ${b[1]}-----`);
  if (other.length > 0) return `${where} holds ${other.join(', ')}: only "-----BEGIN CERTIFICATE-----" blocks are allowed (never a key)`;
  if (rest !== '') return `${where} holds text outside its "-----BEGIN CERTIFICATE-----" blocks (${rest.length} characters): give the PEM blocks only`;
  for (const [i, block] of blocks.entries()) {
    try {
      new X509Certificate(block[0]);
    } catch (e) {
      return `${where}: certificate ${i + 1} of ${blocks.length} does not parse as X.509 (${(e as Error).message})`;
    }
  }
  return undefined;
}

/** Checks the private-network props (docs/private-network.md) before anything is created. */
export function validatePrivateNetworkProps(props: WarmRunnersProps): void {
  if (props.functionSecurityGroups && !props.functionSubnets) {
    throw new Error('functionSecurityGroups is set without functionSubnets: set functionSubnets to put the control-plane functions in the VPC, or leave the security groups out');
  }
  if (props.functionSecurityGroups?.length === 0) throw new Error('functionSecurityGroups is empty: leave it out for one security group with egress only, or list at least one');
  if (props.caCertificates) {
    if (props.caCertificates.length === 0) throw new Error('caCertificates is empty: leave it out, or give at least one PEM certificate');
    for (const [i, pem] of props.caCertificates.entries()) {
      const problem = caCertificateProblem(pem, `caCertificates[${i}]`);
      if (problem) throw new Error(problem);
    }
    // The functions' layer takes any size; the instances' parameter holds 8 KB.
    const length = caBundle(props.caCertificates).length;
    if (length > CA_PARAMETER_MAX_CHARS) {
      throw new Error(
        `caCertificates are ${length} characters together, above the ${CA_PARAMETER_MAX_CHARS} of the SSM parameter the instances read them from (the functions' layer has no such limit): ` +
          "give only the CAs of the CI server's chain, or bake the rest into a RunnerImage with RunnerImageStep.caCertificates (docs/image.md) and keep here the ones the functions need",
      );
    }
  }
  const exposure = props.webhookExposure;
  if (exposure?.kind === WebhookExposureKind.API_GATEWAY) {
    const problem = sourceRangesProblem(exposure.allowedSourceRanges, 'webhookExposure.allowedSourceRanges');
    if (problem) throw new Error(problem);
  }
  // WebhookExposure.none() leaves the reconciler alone to find jobs: every connection has it,
  // but a GitLab fleet of instance runners gives its scan no project to read.
  if (exposure?.kind === WebhookExposureKind.NONE && props.gitlab && gitLabScanCoversNothing(props)) {
    throw new Error(
      'webhookExposure is WebhookExposure.none(), and the GitLab connection registers instance runners (gitlab.runnerType) with no gitlab.reconcileProjectIds and no pool with gitlabProjectId or gitlabGroupId: ' +
        "the reconciler, the only way jobs are found without a webhook, has no project to scan, so no GitLab job would ever be served; set gitlab.reconcileProjectIds to the projects whose jobs the fleet runs, or expose the webhook (WebhookExposure.apiGateway)",
    );
  }
}

/** True when the GitLab reconciler's scan has no project (lambdas/reconcile/gitlab.ts, projectsOf): instance runners and nothing that names a project or group. */
function gitLabScanCoversNothing(props: WarmRunnersProps): boolean {
  const gitlab = props.gitlab!;
  if ((gitlab.runnerType ?? GitLabRunnerType.INSTANCE) !== GitLabRunnerType.INSTANCE) return false;
  if (gitlab.reconcileProjectIds && gitlab.reconcileProjectIds.length > 0) return false;
  return !props.pools.some((p) => p.provider === Provider.GITLAB && (p.gitlabProjectId !== undefined || p.gitlabGroupId !== undefined));
}

/**
 * The fleet's CA certificates for its instances: a String parameter (certificates are public),
 * `ssmPaths(prefix).caCertificates`, read and installed by the boot (templates/start-runner.sh,
 * install_cas). The user data carries the value's SHA-256, never the PEM (it has no room: 16 KB);
 * a change of the certificates changes the digest, so a new launch template version replaces
 * the parked instances that trust the old ones.
 */
export function instanceCaCertificates(scope: Construct, prefix: string, certificates: string[]): { parameter: ssm.StringParameter; sha256: string } {
  const value = caBundle(certificates);
  const parameter = new ssm.StringParameter(scope, 'CaCertificates', {
    parameterName: ssmPaths(prefix).caCertificates,
    description: `Extra CA certificates the ${prefix} runner instances trust (PEM)`,
    stringValue: value,
    // SSM picks the tier by size, and a later smaller value deploys too: a parameter once
    // advanced cannot go back to standard, so a fixed STANDARD after ADVANCED would fail.
    tier: ssm.ParameterTier.INTELLIGENT_TIERING,
  });
  return { parameter, sha256: createHash('sha256').update(value).digest('hex') };
}
