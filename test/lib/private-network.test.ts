import { App, Stack, Validations } from 'aws-cdk-lib';
import { Match, Template } from 'aws-cdk-lib/assertions';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as iam from 'aws-cdk-lib/aws-iam';
import { AwsSolutionsChecks } from 'cdk-nag';
import { execFile, execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:https';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { exampleFleet } from '../../bin/example-props';
import { WarmRunners, WebhookExposure, decodeUserData, type WarmRunnersProps } from '../../lib';
import { FUNCTION_CA_FILE, VPC_ACCESS_ACTIONS } from '../../lib/function-network';
import { GitLabRunnerType, Provider, ssmPaths } from '../../lambdas/shared/contract';
import { isAllowed, resolvePseudo, type Statement } from './iam-eval';

const PSEUDO = { 'AWS::Partition': 'aws', 'AWS::Region': 'eu-west-1', 'AWS::AccountId': '111122223333', 'AWS::URLSuffix': 'amazonaws.com' };

/**
 * The endpoint each AWS service the control-plane functions call needs in a VPC without a NAT
 * (docs/private-network.md), by the service prefix of the actions their roles allow. Not every
 * prefix is a call the function makes itself: see NOT_CALLED.
 */
const ENDPOINT_OF: Record<string, ec2.InterfaceVpcEndpointAwsService | ec2.GatewayVpcEndpointAwsService> = {
  ssm: ec2.InterfaceVpcEndpointAwsService.SSM,
  ec2: ec2.InterfaceVpcEndpointAwsService.EC2,
  sqs: ec2.InterfaceVpcEndpointAwsService.SQS,
  dynamodb: ec2.GatewayVpcEndpointAwsService.DYNAMODB,
  lambda: ec2.InterfaceVpcEndpointAwsService.LAMBDA,
  events: ec2.InterfaceVpcEndpointAwsService.EVENTBRIDGE,
  cloudformation: ec2.InterfaceVpcEndpointAwsService.CLOUDFORMATION,
  states: ec2.InterfaceVpcEndpointAwsService.STEP_FUNCTIONS,
};
/** Allowed, yet called by a service rather than by the function's code: no endpoint of its own. */
const NOT_CALLED: Record<string, string> = {
  kms: 'SSM decrypts and encrypts the SecureString parameters (kms:ViaService)',
  logs: "Lambda delivers the function's own log lines; EMF metrics travel in them",
  iam: 'PassRole and CreateServiceLinkedRole are checked within the EC2 calls',
};

/** A VPC of isolated subnets (no NAT, no internet) with the endpoints ENDPOINT_OF lists, and S3's for the provider framework's response. */
function privateVpc(stack: Stack): ec2.Vpc {
  const vpc = new ec2.Vpc(stack, 'Vpc', {
    maxAzs: 2,
    natGateways: 0,
    subnetConfiguration: [{ name: 'isolated', subnetType: ec2.SubnetType.PRIVATE_ISOLATED }],
    flowLogs: { all: { trafficType: ec2.FlowLogTrafficType.REJECT } },
  });
  for (const [name, service] of Object.entries(ENDPOINT_OF)) {
    if (service instanceof ec2.GatewayVpcEndpointAwsService) vpc.addGatewayEndpoint(name, { service });
    else vpc.addInterfaceEndpoint(name, { service });
  }
  vpc.addGatewayEndpoint('s3', { service: ec2.GatewayVpcEndpointAwsService.S3 });
  vpc.addInterfaceEndpoint('logs', { service: ec2.InterfaceVpcEndpointAwsService.CLOUDWATCH_LOGS });
  // The test's own VPC, not the library's: cdk-nag cannot read the VPC CIDR token of the endpoints' ingress rule.
  for (const child of vpc.node.findAll()) {
    if (child instanceof ec2.InterfaceVpcEndpoint) Validations.of(child).acknowledge({ id: 'AwsSolutions::AwsSolutions-EC23', reason: "The test VPC's interface endpoints admit the VPC's own CIDR (a token cdk-nag cannot evaluate)." });
  }
  return vpc;
}

function fleet(
  props: Partial<WarmRunnersProps> = {},
  build?: (stack: Stack) => Partial<WarmRunnersProps>,
  // The validation plugins run at the app's first synth: a template taken before them would skip them.
  beforeSynth?: (app: App) => void,
): { app: App; stack: Stack; runners: WarmRunners; template: Template } {
  const app = new App({ outdir: mkdtempSync(join(tmpdir(), 'wr-private-')) });
  beforeSynth?.(app);
  const stack = new Stack(app, 'Private');
  const extra = build?.(stack) ?? {};
  const vpc = extra.vpc ?? new ec2.Vpc(stack, 'Vpc', { maxAzs: 2, natGateways: 1, flowLogs: { all: { trafficType: ec2.FlowLogTrafficType.REJECT } } });
  const runners = new WarmRunners(stack, 'Runners', { vpc, ...exampleFleet(ec2.MachineImage.latestAmazonLinux2023()), ...props, ...extra });
  return { app, stack, runners, template: Template.fromStack(stack) };
}

/** Every statement of the policies attached to a role, pseudo parameters resolved. */
function statementsOfRole(template: Template, roleLogicalId: string): Statement[] {
  return Object.values(template.findResources('AWS::IAM::Policy'))
    .filter((p) => (p.Properties.Roles as { Ref: string }[]).some((r) => r.Ref === roleLogicalId))
    .flatMap((p) => resolvePseudo(p.Properties.PolicyDocument.Statement, PSEUDO) as Statement[]);
}

const roleOf = (fn: Record<string, unknown>): string => ((fn.Properties as Record<string, unknown>).Role as { 'Fn::GetAtt': [string, string] })['Fn::GetAtt'][0];

describe('control-plane functions in the VPC (functionSubnets)', () => {
  let synth: ReturnType<typeof fleet>;
  beforeAll(() => {
    synth = fleet({}, (stack) => {
      const vpc = privateVpc(stack);
      return { vpc, vpcSubnets: { subnetType: ec2.SubnetType.PRIVATE_ISOLATED }, functionSubnets: { subnetType: ec2.SubnetType.PRIVATE_ISOLATED } };
    });
  });

  it('puts every function in the selected subnets with one egress-only security group: the fleet\'s, the drain\'s and the provider framework\'s', () => {
    const { template, stack, runners } = synth;
    const subnets = (stack.node.findChild('Vpc') as ec2.Vpc).isolatedSubnets.map((s) => stack.resolve(s.subnetId));
    const functions = template.findResources('AWS::Lambda::Function');
    // webhook, scale-up, pool, scale-down, reconcile, release resolver, drain (2), framework (3)
    expect(Object.keys(functions)).toHaveLength(11);
    const sg = stack.resolve(runners.functionConnections!.securityGroups[0]!.securityGroupId);
    for (const [id, fn] of Object.entries(functions)) {
      expect(fn.Properties.VpcConfig, id).toEqual({ SubnetIds: subnets, SecurityGroupIds: [sg] });
      // Lambda needs the ENI actions on the role it was given (CDK adds no managed policy to a role it did not create).
      // Each on what the Service Authorization Reference scopes it to: only the Describe calls on *.
      const statements = statementsOfRole(template, roleOf(fn));
      const may = (action: string, resource: string) => isAllowed(statements, { action, resource, context: {} });
      const ec2Arn = (resource: string) => `arn:aws:ec2:eu-west-1:111122223333:${resource}`;
      const eni = ec2Arn('network-interface/eni-0123456789abcdef0');
      for (const action of ['ec2:DescribeNetworkInterfaces', 'ec2:DescribeSubnets']) expect(may(action, '*'), `${id} ${action}`).toBe(true);
      for (const target of [eni, ...subnets.map((s) => ec2Arn(`subnet/${resolvePseudo(s, PSEUDO)}`)), ec2Arn(`security-group/${resolvePseudo(sg, PSEUDO)}`)]) {
        expect(may('ec2:CreateNetworkInterface', target), `${id} CreateNetworkInterface on ${target}`).toBe(true);
      }
      expect(may('ec2:CreateNetworkInterface', ec2Arn('subnet/subnet-0other')), `${id} CreateNetworkInterface in another subnet`).toBe(false);
      expect(may('ec2:CreateNetworkInterface', ec2Arn('security-group/sg-0other')), `${id} CreateNetworkInterface with another group`).toBe(false);
      for (const action of ['ec2:DeleteNetworkInterface', 'ec2:AssignPrivateIpAddresses', 'ec2:UnassignPrivateIpAddresses']) {
        expect(may(action, eni), `${id} ${action}`).toBe(true);
        expect(may(action, ec2Arn('instance/i-0123456789abcdef0')), `${id} ${action} on an instance`).toBe(false);
      }
      const onEverything = statements.filter((st) => [st.Resource].flat().includes('*')).flatMap((st) => [st.Action].flat());
      expect(onEverything.filter((a) => VPC_ACCESS_ACTIONS.includes(a)).sort(), id).toEqual(['ec2:DescribeNetworkInterfaces', 'ec2:DescribeSubnets']);
      // Delete stays unconditioned (Lambda's guide: it deletes with the role's credentials).
      expect(statements.filter((st) => [st.Action].flat().includes('ec2:DeleteNetworkInterface')).map((st) => st.Condition), id).toEqual([undefined]);
    }
    template.hasResourceProperties('AWS::EC2::SecurityGroup', {
      GroupDescription: Match.stringLikeRegexp('Control-plane functions'),
      SecurityGroupEgress: [{ CidrIp: '0.0.0.0/0', IpProtocol: '-1' }],
      SecurityGroupIngress: Match.absent(),
    });
    for (const role of Object.values(template.findResources('AWS::IAM::Role'))) expect(role.Properties.ManagedPolicyArns).toBeUndefined();
  });

  it('calls only AWS services the test VPC has an endpoint for (docs/private-network.md names each)', () => {
    const { template } = synth;
    const services = new Set<string>();
    for (const fn of Object.values(template.findResources('AWS::Lambda::Function'))) {
      for (const s of statementsOfRole(template, roleOf(fn))) {
        for (const action of [s.Action].flat()) if (!VPC_ACCESS_ACTIONS.includes(action)) services.add(action.split(':')[0]!);
      }
    }
    const uncovered = [...services].filter((s) => !(s in ENDPOINT_OF) && !(s in NOT_CALLED));
    expect(uncovered).toEqual([]);
    const doc = readFileSync(join(__dirname, '../../docs/private-network.md'), 'utf8');
    for (const s of services) if (s in ENDPOINT_OF) expect(doc, `docs/private-network.md names com.amazonaws.<region>.${s}`).toContain(`com.amazonaws.<region>.${s}`);
    expect(doc).toContain('com.amazonaws.<region>.s3');
    expect(doc).toContain('com.amazonaws.<region>.logs');
  });

  it('uses the security groups given, and lets the CI server allow them', () => {
    const { template, runners, stack } = fleet({}, (s) => {
      const vpc = privateVpc(s);
      const sg = new ec2.SecurityGroup(s, 'Mine', { vpc, allowAllOutbound: false });
      return { vpc, vpcSubnets: { subnetType: ec2.SubnetType.PRIVATE_ISOLATED }, functionSubnets: { subnetType: ec2.SubnetType.PRIVATE_ISOLATED }, functionSecurityGroups: [sg] };
    });
    const mine = stack.resolve((stack.node.findChild('Mine') as ec2.SecurityGroup).securityGroupId);
    for (const fn of Object.values(template.findResources('AWS::Lambda::Function'))) expect(fn.Properties.VpcConfig.SecurityGroupIds).toEqual([mine]);
    expect(runners.functionConnections!.securityGroups).toHaveLength(1);
    expect(template.findResources('AWS::EC2::SecurityGroup', { Properties: { GroupDescription: Match.stringLikeRegexp('Control-plane functions') } })).toEqual({});
  });

  it('leaves the functions outside any VPC by default', () => {
    const { template, runners } = fleet();
    for (const fn of Object.values(template.findResources('AWS::Lambda::Function'))) expect(fn.Properties.VpcConfig).toBeUndefined();
    expect(runners.functionConnections).toBeUndefined();
  });

  it('refuses security groups without subnets, an empty list, and public subnets', () => {
    expect(() => fleet({}, (s) => ({ functionSecurityGroups: [ec2.SecurityGroup.fromSecurityGroupId(s, 'X', 'sg-12345678')] }))).toThrow(
      /functionSecurityGroups is set without functionSubnets: set functionSubnets/,
    );
    expect(() => fleet({ functionSubnets: { subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS }, functionSecurityGroups: [] })).toThrow(/functionSecurityGroups is empty/);
    expect(() => fleet({ functionSubnets: { subnetType: ec2.SubnetType.PUBLIC } })).toThrow(/functionSubnets selects public subnets: .*docs\/private-network\.md/);
  });
});

describe('webhook exposure', () => {
  const GITHUB_HOOKS = ['192.30.252.0/22', '185.199.108.0/22', '140.82.112.0/20', '143.55.64.0/20', '2a0a:a440::/29', '2606:50c0::/32'];

  it('by default: a public Function URL, its URL in the outputs and in webhookUrl and webhookEndpoint', () => {
    const { template, runners, stack } = fleet();
    template.resourceCountIs('AWS::Lambda::Url', 1);
    template.resourceCountIs('AWS::ApiGateway::RestApi', 0);
    // webhookUrl (deprecated) stays a FunctionUrl, as before webhookEndpoint existed.
    expect(runners.webhookUrl).toBe(runners.webhookFunction.node.findChild('FunctionUrl'));
    expect(stack.resolve(runners.webhookEndpoint)).toEqual(stack.resolve(runners.webhookUrl.url));
    const outputs = template.findOutputs('*');
    expect(Object.keys(outputs).filter((k) => /WebhookUrl/.test(k))).toHaveLength(2);
  });

  it('apiGateway: a REST API whose resource policy admits the listed ranges only (evaluated), access logs on, no Function URL', () => {
    const { template, runners, stack } = fleet({ webhookExposure: WebhookExposure.apiGateway({ allowedSourceRanges: GITHUB_HOOKS }) });
    template.resourceCountIs('AWS::Lambda::Url', 0);
    expect(() => runners.webhookUrl).toThrow(/^webhookUrl exists only with WebhookExposure\.functionUrl\(\): use webhookEndpoint$/);
    expect(runners.webhookApi).toBeDefined();
    const [api] = Object.values(template.findResources('AWS::ApiGateway::RestApi'));
    expect(api!.Properties.EndpointConfiguration).toEqual({ Types: ['REGIONAL'] });
    const policy = api!.Properties.Policy.Statement as (Statement & { Principal: unknown })[];
    const invoke = (sourceIp: string) => isAllowed(policy, { action: 'execute-api:Invoke', resource: 'execute-api:/webhook/POST/github', context: { 'aws:SourceIp': sourceIp } });
    expect(invoke('192.30.252.17')).toBe(true);
    expect(invoke('140.82.115.3')).toBe(true);
    expect(invoke('2a0a:a440::1')).toBe(true);
    expect(invoke('203.0.113.9')).toBe(false);
    expect(invoke('192.30.251.255')).toBe(false);
    expect(invoke('2001:db8::1')).toBe(false);
    template.hasResourceProperties('AWS::ApiGateway::Stage', { StageName: 'webhook', AccessLogSetting: { DestinationArn: Match.anyValue(), Format: Match.anyValue() } });
    template.resourceCountIs('AWS::ApiGateway::Account', 0);
    // POST on /github and /gitlab, proxied to the webhook function.
    const methods = Object.values(template.findResources('AWS::ApiGateway::Method'));
    expect(methods.map((m) => m.Properties.HttpMethod)).toEqual(['POST', 'POST']);
    for (const m of methods) expect(m.Properties.Integration.Type).toBe('AWS_PROXY');
    const paths = Object.values(template.findResources('AWS::ApiGateway::Resource')).map((r) => r.Properties.PathPart);
    expect(paths.sort()).toEqual(['github', 'gitlab']);
    expect(stack.resolve(template.findOutputs('*')[Object.keys(template.findOutputs('*')).find((k) => k.includes('GitHubWebhookUrl'))!]!.Value)).toEqual(
      stack.resolve(`${runners.webhookEndpoint}github`),
    );
  });

  it('none(): no Function URL, no API, no webhook output; the reconciler stays', () => {
    const { template, runners } = fleet({ webhookExposure: WebhookExposure.none() });
    template.resourceCountIs('AWS::Lambda::Url', 0);
    template.resourceCountIs('AWS::ApiGateway::RestApi', 0);
    template.resourceCountIs('AWS::Lambda::Permission', Object.keys(template.findResources('AWS::Lambda::Permission', { Properties: { Principal: 'events.amazonaws.com' } })).length);
    expect(() => runners.webhookUrl).toThrow(/^webhookUrl exists only with WebhookExposure\.functionUrl\(\): use webhookEndpoint$/);
    expect(runners.webhookEndpoint).toBeUndefined();
    expect(Object.keys(template.findOutputs('*')).filter((k) => /WebhookUrl/.test(k))).toEqual([]);
    expect(runners.reconcileFunction).toBeDefined();
  });

  it('none() with GitLab instance runners: refused while the reconciler would scan no project, naming gitlab.reconcileProjectIds', () => {
    const instance = { url: 'https://gitlab.example.com' };
    const none = (props: Partial<WarmRunnersProps>) => () => fleet({ webhookExposure: WebhookExposure.none(), ...props });
    expect(none({ gitlab: instance })).toThrow(/^webhookExposure is WebhookExposure\.none\(\), .*no gitlab\.reconcileProjectIds and no pool with gitlabProjectId or gitlabGroupId: .*set gitlab\.reconcileProjectIds/);
    expect(none({ gitlab: { ...instance, runnerType: GitLabRunnerType.INSTANCE, reconcileProjectIds: [] } })).toThrow(/set gitlab\.reconcileProjectIds/);
    // A scan that covers something is served.
    expect(none({ gitlab: { ...instance, reconcileProjectIds: [7] } })).not.toThrow();
    expect(none({ gitlab: { ...instance, runnerType: GitLabRunnerType.GROUP, scopeId: 42 } })).not.toThrow();
    const pools = exampleFleet(ec2.MachineImage.latestAmazonLinux2023()).pools.map((p) => (p.provider === Provider.GITLAB ? { ...p, gitlabProjectId: 9 } : p));
    expect(none({ gitlab: instance, pools })).not.toThrow();
    // With a webhook, instance runners are served by their deliveries.
    expect(() => fleet({ gitlab: instance })).not.toThrow();
  });

  it('refuses source ranges that are not CIDRs, an empty list and a range of every address, naming the prop', () => {
    const gw = (ranges: string[]) => () => fleet({ webhookExposure: WebhookExposure.apiGateway({ allowedSourceRanges: ranges }) });
    expect(gw([])).toThrow(/webhookExposure\.allowedSourceRanges is empty: .*api\.github\.com\/meta/);
    expect(gw(['192.30.252.0/22', '10.0.0.256/8'])).toThrow(/webhookExposure\.allowedSourceRanges\[1\] "10\.0\.0\.256\/8" is not an IPv4 or IPv6 CIDR/);
    expect(gw(['192.30.252.0'])).toThrow(/allowedSourceRanges\[0\] "192\.30\.252\.0" is not an IPv4 or IPv6 CIDR/);
    expect(gw(['2a0a:a440::/129'])).toThrow(/is not an IPv4 or IPv6 CIDR/);
    expect(gw(['0.0.0.0/0'])).toThrow(/allowedSourceRanges\[0\] "0\.0\.0\.0\/0" allows every address: use WebhookExposure\.functionUrl\(\)/);
  });
});

describe('extra CA certificates', () => {
  let dir: string;
  let ca: string;
  let otherCa: string;
  let server: Server;
  let port: number;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'wr-ca-'));
    const openssl = (...args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: ['ignore', 'ignore', 'pipe'] });
    const newCa = (name: string) => openssl('req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-keyout', `${name}.key`, '-out', `${name}.pem`, '-days', '2', '-subj', `/CN=${name}`);
    newCa('test-ca');
    newCa('other-ca');
    openssl('req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-keyout', 'server.key', '-out', 'server.csr', '-subj', '/CN=127.0.0.1');
    writeFileSync(join(dir, 'san.ext'), 'subjectAltName=IP:127.0.0.1\n');
    openssl('x509', '-req', '-in', 'server.csr', '-CA', 'test-ca.pem', '-CAkey', 'test-ca.key', '-CAcreateserial', '-out', 'server.pem', '-days', '2', '-extfile', 'san.ext');
    ca = readFileSync(join(dir, 'test-ca.pem'), 'utf8');
    otherCa = readFileSync(join(dir, 'other-ca.pem'), 'utf8');
    server = createServer({ key: readFileSync(join(dir, 'server.key')), cert: readFileSync(join(dir, 'server.pem')) }, (_req, res) => res.end('ci server'));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    port = (server.address() as AddressInfo).port;
  });
  afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

  /** A Node process (the functions' runtime) fetching from the loopback CI server with this environment. */
  async function fetchFromCi(env: Record<string, string>): Promise<string> {
    const script = `fetch('https://127.0.0.1:${port}/').then((r) => r.text()).then((t) => console.log(t), (e) => { console.log('refused: ' + (e.cause?.code ?? e.message)); })`;
    const { stdout } = await promisify(execFile)(process.execPath, ['-e', script], { env: { PATH: process.env.PATH ?? '', ...env } });
    return stdout.trim();
  }

  it('reach every function as a layer file that NODE_EXTRA_CA_CERTS names: a Node process trusts the CI server with it, not without', async () => {
    const { app, template, stack } = fleet({ caCertificates: [otherCa, ca] });
    const assembly = app.synth();
    const functions = Object.entries(template.findResources('AWS::Lambda::Function'));
    const [layerId] = Object.keys(template.findResources('AWS::Lambda::LayerVersion'));
    const ours = functions.filter(([, fn]) => fn.Properties.Handler !== 'framework.onEvent' && fn.Properties.Handler !== 'framework.isComplete' && fn.Properties.Handler !== 'framework.onTimeout');
    expect(ours.length).toBeGreaterThanOrEqual(8);
    for (const [id, fn] of ours) {
      expect(fn.Properties.Environment.Variables.NODE_EXTRA_CA_CERTS, id).toBe(FUNCTION_CA_FILE);
      expect(fn.Properties.Layers, id).toEqual([{ Ref: layerId }]);
    }
    // The layer's staged asset, as Lambda extracts it under /opt.
    const key = stack.resolve(template.findResources('AWS::Lambda::LayerVersion')[layerId!]!.Properties.Content.S3Key) as string;
    const staged = join(assembly.directory, `asset.${key.replace(/\.zip$/, '')}`);
    const file = join(staged, FUNCTION_CA_FILE.replace(/^\/opt\//, ''));
    expect(existsSync(file)).toBe(true);
    expect(await fetchFromCi({})).toMatch(/^refused: (SELF_SIGNED_CERT_IN_CHAIN|UNABLE_TO_GET_ISSUER_CERT_LOCALLY|UNABLE_TO_VERIFY_LEAF_SIGNATURE)$/);
    expect(await fetchFromCi({ NODE_EXTRA_CA_CERTS: file })).toBe('ci server');
  });

  it('reach the instances: a String parameter the instance role may read, its name and SHA-256 in the user data, never the PEM', () => {
    const { template, stack, runners } = fleet({ caCertificates: [ca, otherCa] });
    const value = `${ca.trim()}\n${otherCa.trim()}`;
    template.hasResourceProperties('AWS::SSM::Parameter', { Name: ssmPaths('warm-runners').caCertificates, Type: 'String', Value: value });
    const sha = createHash('sha256').update(value).digest('hex');
    for (const lt of Object.values(template.findResources('AWS::EC2::LaunchTemplate'))) {
      const text = decodeUserData(stack.resolve(lt.Properties.LaunchTemplateData.UserData) as string);
      expect(text).toContain(`CA=${ssmPaths('warm-runners').caCertificates}`);
      expect(text).toContain(`CA_SUM=${sha}`);
      expect(text).not.toContain('BEGIN CERTIFICATE');
    }
    const role = stack.getLogicalId(runners.fleet.role.node.defaultChild as never);
    const statements = statementsOfRole(template, role);
    const arn = `arn:aws:ssm:eu-west-1:111122223333:parameter${ssmPaths('warm-runners').caCertificates}`;
    expect(isAllowed(statements, { action: 'ssm:GetParameter', resource: arn, context: {} })).toBe(true);
  });

  it('go into an Intelligent-Tiering parameter (a deploy that shrinks them never asks SSM to go back to standard); above 8 KB refused, naming the way out', () => {
    const { template } = fleet({ caCertificates: [ca] });
    template.hasResourceProperties('AWS::SSM::Parameter', { Name: ssmPaths('warm-runners').caCertificates, Tier: 'Intelligent-Tiering' });
    const many = Array.from({ length: 16 }, (_, i) =>
      execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-keyout', '/dev/null', '-days', '1', '-subj', `/CN=ca-${i}-${'x'.repeat(40)}`], {
        encoding: 'utf8',
        stdio: ['ignore', 'pipe', 'ignore'],
      }),
    );
    expect(many.join('\n').length).toBeGreaterThan(8192);
    expect(() => fleet({ caCertificates: many })).toThrow(
      /^caCertificates are \d+ characters together, above the 8192 of the SSM parameter the instances read them from .*RunnerImageStep\.caCertificates \(docs\/image\.md\)/,
    );
  });

  it('reach a pool with its own instance role: that role reads the parameter too', () => {
    const { template, stack } = fleet({ caCertificates: [ca] }, (st) => {
      const own = new iam.Role(st, 'OwnRole', { assumedBy: new iam.ServicePrincipal('ec2.amazonaws.com') });
      const example = exampleFleet(ec2.MachineImage.latestAmazonLinux2023());
      return { pools: example.pools.map((p, i) => (i === 0 ? { ...p, instanceRole: own } : p)) };
    });
    const role = stack.getLogicalId(stack.node.findChild('OwnRole').node.defaultChild as never);
    const arn = `arn:aws:ssm:eu-west-1:111122223333:parameter${ssmPaths('warm-runners').caCertificates}`;
    expect(isAllowed(statementsOfRole(template, role), { action: 'ssm:GetParameter', resource: arn, context: {} })).toBe(true);
  });

  it('are refused unless each is one or more CERTIFICATE blocks that parse, naming the entry and never echoing it', () => {
    const key = readFileSync(join(dir, 'test-ca.key'), 'utf8');
    const refused = (pems: string[]) => () => fleet({ caCertificates: pems });
    expect(refused([])).toThrow(/caCertificates is empty/);
    expect(refused([ca, 'not a certificate'])).toThrow(/caCertificates\[1\] holds no PEM certificate/);
    expect(refused([`${ca}\n${key}`])).toThrow(/caCertificates\[0\] holds -----BEGIN PRIVATE KEY-----: only "-----BEGIN CERTIFICATE-----" blocks/);
    expect(refused([`${ca}\ntrailing words`])).toThrow(/caCertificates\[0\] holds text outside its "-----BEGIN CERTIFICATE-----" blocks/);
    expect(refused([ca.replace(/\n[A-Za-z0-9+/]{10}/, '\nAAAAAAAAAA')])).toThrow(/caCertificates\[0\]: certificate 1 of 1 does not parse as X\.509/);
    try {
      refused([`${ca}\n${key}`])();
    } catch (e) {
      expect((e as Error).message).not.toContain(key.split('\n')[1]);
    }
    // Two certificates in one entry are fine.
    expect(() => fleet({ caCertificates: [`${ca}${otherCa}`] })).not.toThrow();
  });
});

describe('cdk-nag', () => {
  it('finds nothing unacknowledged in a private fleet with the API Gateway exposure and CA certificates', () => {
    // fleet() synthesizes (Template.fromStack): a finding without its acknowledgement throws there.
    const { app } = fleet(
      {
        webhookExposure: WebhookExposure.apiGateway({ allowedSourceRanges: ['192.30.252.0/22'] }),
        caCertificates: [
          execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-keyout', '/dev/null', '-days', '1', '-subj', '/CN=nag'], {
            encoding: 'utf8',
            stdio: ['ignore', 'pipe', 'ignore'],
          }),
        ],
      },
      (stack) => ({ vpc: privateVpc(stack), vpcSubnets: { subnetType: ec2.SubnetType.PRIVATE_ISOLATED }, functionSubnets: { subnetType: ec2.SubnetType.PRIVATE_ISOLATED } }),
      (a) => Validations.of(a).addPlugins(new AwsSolutionsChecks(a)),
    );
    const report = readFileSync(join(app.outdir, 'validation-report.json'), 'utf8');
    expect(report).not.toMatch(/"status":\s*"failure"/);
  });
});
