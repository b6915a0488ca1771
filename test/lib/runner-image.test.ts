import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { App, Duration, Stack, Validations } from 'aws-cdk-lib';
import { Match, Template } from 'aws-cdk-lib/assertions';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as events from 'aws-cdk-lib/aws-events';
import { AwsSolutionsChecks } from 'cdk-nag';
import { describe, expect, it } from 'vitest';
import { parseFleetConfig, Provider } from '../../lambdas/shared/contract';
import { renderInstallScript, RunnerImage, RunnerImageArchitecture, WarmRunners, type RunnerImageProps } from '../../lib';
import { componentDocument, componentShellStep } from '../support/image-component';

const ENV = { account: '111122223333', region: 'eu-west-1' };
function synth(props: RunnerImageProps): { image: RunnerImage; template: Template } {
  const stack = new Stack(new App(), 'Images', { env: ENV });
  const image = new RunnerImage(stack, 'Image', props);
  return { image, template: Template.fromStack(stack) };
}
const only = (template: Template, type: string) => {
  const found = Object.values(template.findResources(type));
  expect(found, type).toHaveLength(1);
  return found[0]!.Properties;
};

describe('RunnerImage', () => {
  it.each([Provider.GITHUB, Provider.GITLAB])('%s: the component document holds exactly the rendered install script, as one ExecuteBash step', (provider) => {
    const { template } = synth({ provider });
    expect(componentShellStep(template)).toBe(renderInstallScript({ provider }));
    expect(componentDocument(template).phases.map((p) => [p.name, p.steps.length])).toEqual([['build', 1]]);
    expect(only(template, 'AWS::ImageBuilder::Component')).toMatchObject({ Platform: 'Linux', SupportedOsVersions: ['Amazon Linux 2023'] });
  });

  it('renders the props into the component: runner package, user and directory', () => {
    const runnerPackage = {
      version: '9.9.9',
      x64: { url: 'https://mirror.example.com/r-x64.tar.gz', sha256: createHash('sha256').update('x64').digest('hex') },
      arm64: { url: 'https://mirror.example.com/r-arm64.tar.gz', sha256: createHash('sha256').update('arm64').digest('hex') },
    };
    const options = { provider: Provider.GITHUB, runnerUser: 'ci', runnerDirectory: '/srv/runner', runnerPackage };
    const { template } = synth(options);
    expect(componentShellStep(template)).toBe(renderInstallScript({ provider: Provider.GITHUB, runnerUser: 'ci', runnerDir: '/srv/runner', runnerPackage }));
    expect(componentShellStep(template)).toContain('https://mirror.example.com/r-arm64.tar.gz');
  });

  it('a new script is a new component and recipe version (Image Builder versions are immutable)', () => {
    const a = synth({ provider: Provider.GITHUB }).template;
    const b = synth({ provider: Provider.GITHUB, runnerUser: 'ci' }).template;
    const versions = (t: Template) => [only(t, 'AWS::ImageBuilder::Component').Version, only(t, 'AWS::ImageBuilder::ImageRecipe').Version];
    expect(versions(a)[0]).toMatch(/^1\.\d+\.\d+$/);
    expect(versions(a)).toEqual(versions(synth({ provider: Provider.GITHUB }).template));
    expect(versions(b)[0]).not.toBe(versions(a)[0]);
    expect(versions(b)[1]).not.toBe(versions(a)[1]);
  });

  it.each<[RunnerImageArchitecture | undefined, string, string]>([
    [undefined, 'amazon-linux-2023-x86/x.x.x', 'm7i.large'],
    [RunnerImageArchitecture.ARM64, 'amazon-linux-2023-arm64/x.x.x', 'm7g.large'],
  ])('architecture %s: the recipe takes the latest AL2023 of that architecture, built on %s', (architecture, parent, type) => {
    const { template } = synth({ provider: Provider.GITHUB, ...(architecture ? { architecture } : {}) });
    const recipe = only(template, 'AWS::ImageBuilder::ImageRecipe');
    expect(JSON.stringify(recipe.ParentImage)).toContain(`:aws:image/${parent}`);
    expect(recipe.Components).toHaveLength(1);
    expect(recipe.Components[0].ComponentArn['Fn::GetAtt'][0]).toMatch(/^ImageInstallComponent/);
    expect(only(template, 'AWS::ImageBuilder::InfrastructureConfiguration')).toMatchObject({ InstanceTypes: [type], TerminateInstanceOnFailure: true });
  });

  it('builds weekly by default, on the given cron schedule otherwise, and refuses a rate', () => {
    expect(only(synth({ provider: Provider.GITHUB }).template, 'AWS::ImageBuilder::ImagePipeline')).toMatchObject({
      Schedule: { ScheduleExpression: 'cron(0 3 ? * SUN *)', PipelineExecutionStartCondition: 'EXPRESSION_MATCH_ONLY' },
      Status: 'ENABLED',
    });
    const daily = synth({ provider: Provider.GITHUB, schedule: events.Schedule.cron({ hour: '1', minute: '30' }) }).template;
    expect(only(daily, 'AWS::ImageBuilder::ImagePipeline').Schedule.ScheduleExpression).toBe('cron(30 1 * * ? *)');
    expect(() => synth({ provider: Provider.GITHUB, schedule: events.Schedule.rate(Duration.days(7)) })).toThrow(/schedule "rate\(7 days\)" must be a cron expression/);
  });

  it('publishes each AMI id to its aws:ec2:image parameter, which the stack creates (stock AL2023) and deletes', () => {
    const { image, template } = synth({ provider: Provider.GITHUB, parameterName: '/ci/images/github' });
    expect(image.parameterName).toBe('/ci/images/github');
    const distribution = only(template, 'AWS::ImageBuilder::DistributionConfiguration');
    expect(distribution.Distributions).toEqual([
      expect.objectContaining({ SsmParameterConfigurations: [{ ParameterName: '/ci/images/github', DataType: 'aws:ec2:image' }] }),
    ]);
    const seed = only(template, 'Custom::AWS');
    // The SDK calls, with the stock AMI's reference (a CloudFormation parameter) as "<ref>".
    const call = (value: unknown) => JSON.parse(typeof value === 'string' ? value : (value as { 'Fn::Join': [string, unknown[]] })['Fn::Join'][1].map((p) => (typeof p === 'string' ? p : '<ref>')).join(''));
    expect(call(seed.Create)).toMatchObject({
      action: 'putParameter',
      parameters: { Name: '/ci/images/github', Value: '<ref>', Type: 'String', DataType: 'aws:ec2:image', Overwrite: false },
      ignoreErrorCodesMatching: 'ParameterAlreadyExists',
    });
    expect(call(seed.Delete)).toMatchObject({ action: 'deleteParameter', parameters: { Name: '/ci/images/github' } });
    expect(seed.Update).toBeUndefined();
    // The pipeline goes first on destroy: no build publishes into a deleted name.
    const [pipelineId] = Object.keys(template.findResources('AWS::ImageBuilder::ImagePipeline'));
    const [seedId] = Object.keys(template.findResources('Custom::AWS'));
    expect(template.toJSON().Resources[pipelineId!].DependsOn).toContain(seedId);
  });

  it('gives the build instance exactly what Image Builder requires, and denies it the fleet\'s parameters', () => {
    const { template } = synth({ provider: Provider.GITHUB });
    const roles = template.findResources('AWS::IAM::Role', { Properties: { AssumeRolePolicyDocument: { Statement: [Match.objectLike({ Principal: { Service: 'ec2.amazonaws.com' } })] } } });
    const [roleId, role] = Object.entries(roles)[0]!;
    expect(Object.keys(roles)).toHaveLength(1);
    expect(JSON.stringify(role.Properties.ManagedPolicyArns)).toMatch(/policy\/EC2InstanceProfileForImageBuilder".*policy\/AmazonSSMManagedInstanceCore"/);
    expect(role.Properties.ManagedPolicyArns).toHaveLength(2);
    const inline = Object.values(template.findResources('AWS::IAM::Policy')).filter((p) => JSON.stringify(p.Properties.Roles).includes(roleId));
    // Only a Deny: AmazonSSMManagedInstanceCore may read any parameter, the CI secrets included.
    const statements = inline.flatMap((p) => p.Properties.PolicyDocument.Statement as { Effect: string; Action: string[]; NotResource: unknown[]; Resource?: unknown }[]);
    expect(statements).toHaveLength(1);
    const [deny] = statements;
    expect(deny).toMatchObject({ Effect: 'Deny' });
    expect(deny!.Resource).toBeUndefined();
    expect(deny!.Action).toEqual(expect.arrayContaining(['ssm:GetParameter', 'ssm:GetParameters', 'ssm:GetParametersByPath', 'ssm:GetParameterHistory']));
    // Everything but AWS's public parameters: each exception ends in parameter/aws/service/*.
    expect(deny!.NotResource).toHaveLength(2);
    for (const r of deny!.NotResource) expect(JSON.stringify(r)).toMatch(/:parameter\/aws\/service\/\*"\]\]\}$/);
  });

  it('puts the build instance in the given VPC with an egress-only security group', () => {
    const stack = new Stack(new App(), 'Images', { env: ENV });
    const vpc = new ec2.Vpc(stack, 'Vpc');
    new RunnerImage(stack, 'Image', { provider: Provider.GITHUB, vpc });
    const infra = only(Template.fromStack(stack), 'AWS::ImageBuilder::InfrastructureConfiguration');
    expect(infra.SubnetId).toBeDefined();
    expect(infra.SecurityGroupIds).toHaveLength(1);
  });

  it.each<[string, Partial<RunnerImageProps>, RegExp]>([
    ['a parameter name without a leading slash', { parameterName: 'images/x' }, /parameterName "images\/x" must be an SSM path/],
    ['no build instance type', { buildInstanceTypes: [] }, /buildInstanceTypes is empty/],
    ['an unknown provider', { provider: 'bitbucket' as Provider }, /provider "bitbucket" must be Provider.GITHUB or Provider.GITLAB/],
  ])('refuses %s', (_name, change, message) => {
    expect(() => synth({ provider: Provider.GITHUB, ...change })).toThrow(message);
  });
});

describe('a fleet whose pool uses a RunnerImage', () => {
  const build = () => {
    const app = new App({ outdir: mkdtempSync(join(tmpdir(), 'wr-image-')) });
    // Environment-agnostic, as the fleet's cdk-nag acknowledgements are written.
    const stack = new Stack(app, 'Fleet');
    const image = new RunnerImage(stack, 'Image', { provider: Provider.GITHUB, parameterName: '/ci/images/github' });
    const vpc = new ec2.Vpc(stack, 'Vpc');
    vpc.addFlowLog('FlowLog');
    const runners = new WarmRunners(stack, 'Runners', {
      vpc,
      github: { appId: '1', organization: 'acme' },
      pools: [
        { name: 'imaged', provider: Provider.GITHUB, machineImage: image.machineImage(), warm: { size: 1 } },
        { name: 'stock', provider: Provider.GITHUB, machineImage: ec2.MachineImage.latestAmazonLinux2023() },
      ],
    });
    return { app, stack, runners };
  };

  it('resolves the parameter at launch and carries it in the fleet config of that pool only', () => {
    const { stack, runners } = build();
    const template = Template.fromStack(stack);
    template.hasResourceProperties('AWS::EC2::LaunchTemplate', { LaunchTemplateData: Match.objectLike({ ImageId: 'resolve:ssm:/ci/images/github' }) });
    const config = parseFleetConfig(JSON.stringify(stack.resolve(runners.config)).replace(/\{"Ref":"[^"]+"\}|\{"Fn::GetAtt":\[[^\]]+\]\}/g, '"x"'));
    expect(config.pools.map((p) => [p.name, p.imageParameter])).toEqual([
      ['imaged', '/ci/images/github'],
      ['stock', undefined],
    ]);
  });

  it('deploys that pool\'s launch template after the seed that creates the parameter, the stock pool\'s without it', () => {
    const { stack } = build();
    const template = Template.fromStack(stack);
    const seeds = Object.keys(template.findResources('Custom::AWS')).filter((id) => id.startsWith('Image'));
    expect(seeds).toHaveLength(1);
    const templates = template.findResources('AWS::EC2::LaunchTemplate');
    const dependsOn = (pool: string) => Object.entries(templates).find(([id]) => id.includes(`LaunchTemplate${pool}`))![1].DependsOn ?? [];
    expect(dependsOn('imaged')).toContain(seeds[0]);
    expect(dependsOn('stock')).not.toContain(seeds[0]);
  });

  it('lets the pool read that parameter (and scale-up resolve it at launch), no other', () => {
    const { stack, runners } = build();
    const statements = (fn: { role?: unknown }) => {
      const policies = Object.values(Template.fromStack(stack).findResources('AWS::IAM::Policy'));
      const roleId = stack.resolve((fn.role as { roleName: string }).roleName).Ref as string;
      return policies.filter((p) => JSON.stringify(p.Properties.Roles).includes(roleId)).flatMap((p) => p.Properties.PolicyDocument.Statement);
    };
    const imageStatements = (fn: { role?: unknown }) => statements(fn).filter((s: { Resource: unknown }) => JSON.stringify(s.Resource).includes('parameter/ci/images/github'));
    expect(imageStatements(runners.poolFunction).map((s: { Action: unknown }) => s.Action)).toEqual([['ssm:GetParameter', 'ssm:GetParameters']]);
    expect(imageStatements(runners.scaleUpFunction).map((s: { Action: unknown }) => s.Action)).toEqual(['ssm:GetParameters']);
    expect(imageStatements(runners.scaleDownFunction)).toEqual([]);
    expect(imageStatements(runners.webhookFunction)).toEqual([]);
  });

  it('is cdk-nag clean, every acknowledgement on its construct with a reason', () => {
    const { app } = build();
    Validations.of(app).addPlugins(new AwsSolutionsChecks(app));
    expect(() => app.synth()).not.toThrow();
    const report = JSON.parse(readFileSync(join(app.outdir, 'validation-report.json'), 'utf8'));
    expect(JSON.stringify(report)).not.toMatch(/"status":\s*"failure"/);
    const imageAcks = report.pluginReports
      .flatMap((r: { suppressedViolations?: { acknowledgedAt: string; reason: string; ruleName: string }[] }) => r.suppressedViolations ?? [])
      .filter((v: { acknowledgedAt: string }) => /Fleet\/(Image|AWS679f53fac002430cb0da5b7982bd2287)\//.test(v.acknowledgedAt));
    expect(imageAcks.map((v: { ruleName: string }) => v.ruleName).sort()).toEqual([
      'AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/AmazonSSMManagedInstanceCore]',
      'AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/EC2InstanceProfileForImageBuilder]',
      'AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]',
      'AwsSolutions-IAM5[Resource::*]',
    ]);
    for (const v of imageAcks) expect(v.reason.length).toBeGreaterThan(30);
  });
});
