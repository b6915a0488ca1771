import { createHash } from 'node:crypto';
import { Aws, Stack, Token } from 'aws-cdk-lib';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as events from 'aws-cdk-lib/aws-events';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as imagebuilder from 'aws-cdk-lib/aws-imagebuilder';
import type * as s3assets from 'aws-cdk-lib/aws-s3-assets';
import * as cr from 'aws-cdk-lib/custom-resources';
import { Construct } from 'constructs';
import { DEFAULT_PREFIX, DEFAULT_RUNNER_PACKAGES, Provider, type RunnerPackage } from '../lambdas/shared/contract';
import { instanceTypeArchitecture, RunnerImageArchitecture } from './image-architecture';
import { acknowledgeManagedPolicy, acknowledgeWildcard } from './nag';
import { ParameterMachineImage } from './parameter-machine-image';
import { COMPONENT_DATA_MAX, type RunnerImageStep } from './runner-image-steps';
import { renderInstallScript, type UserDataOptions } from './user-data';

export { RunnerImageArchitecture } from './image-architecture';

/** Per architecture: Image Builder's managed Amazon Linux 2023 image, the SSM path of the stock AMI, a build instance type. */
const ARCHITECTURES: Record<RunnerImageArchitecture, { managedImage: string; stockParameter: string; instanceType: string }> = {
  [RunnerImageArchitecture.X86_64]: {
    managedImage: 'amazon-linux-2023-x86',
    stockParameter: '/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64',
    instanceType: 'm7i.large',
  },
  [RunnerImageArchitecture.ARM64]: {
    managedImage: 'amazon-linux-2023-arm64',
    stockParameter: '/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-arm64',
    instanceType: 'm7g.large',
  },
};

const IMAGE_BUILDER_POLICIES = ['EC2InstanceProfileForImageBuilder', 'AmazonSSMManagedInstanceCore'];

/** Id of the function every AwsCustomResource of a stack shares (aws-cdk-lib custom-resources). */
const AWS_CUSTOM_RESOURCE_SINGLETON = 'AWS679f53fac002430cb0da5b7982bd2287';

/** Name of the install component's one step: the test harness finds the script by it. */
export const INSTALL_STEP_NAME = 'InstallRunner';

export interface RunnerImageProps {
  /** The CI service whose runner the image carries (GitHub's actions-runner or gitlab-runner): one image serves pools of that provider. */
  readonly provider: Provider;
  /**
   * CPU architecture of the image: one RunnerImage builds one architecture (make two for x86_64 and arm64 pools).
   * @default RunnerImageArchitecture.X86_64
   */
  readonly architecture?: RunnerImageArchitecture;
  /**
   * The runner release the image installs; give pools that use the image the same value.
   * @default - the library's pinned release for the provider (`DEFAULT_RUNNER_PACKAGES`)
   */
  readonly runnerPackage?: RunnerPackage;
  /**
   * User the runner runs as; the pools' `runnerUser` must be the same.
   * @default 'runner'
   */
  readonly runnerUser?: string;
  /**
   * Directory of the runner on the image; the pools' `runnerDirectory` must be the same.
   * @default '/opt/actions-runner' for GitHub, '/opt/gitlab-runner' for GitLab
   */
  readonly runnerDirectory?: string;
  /**
   * The team's own steps, run in order after the runner's install step (each one component of
   * the recipe): Image Builder components (`RunnerImageStep.component(arn)`,
   * `RunnerImageStep.fromCfnComponent`), shell commands (`RunnerImageStep.shell`), and the
   * built-in `RunnerImageStep.docker()` and `RunnerImageStep.caCertificates(pems)`. A failing
   * step fails the build: no image is published, pools keep the last one.
   * @default - none: the image carries the runner only
   */
  readonly steps?: RunnerImageStep[];
  /**
   * When the pipeline builds a new image. Image Builder takes cron expressions only.
   * @default events.Schedule.cron({ weekDay: 'SUN', hour: '3', minute: '0' }) (weekly, Sunday 03:00 UTC)
   */
  readonly schedule?: events.Schedule;
  /**
   * SSM parameter (data type `aws:ec2:image`) the pipeline publishes each new AMI id to.
   * @default '/warm-runners/images/warm-runners-<provider>-<architecture>-<8 hex digits of this construct's path>'
   */
  readonly parameterName?: string;
  /**
   * Instance types of the build instance; they must match `architecture`.
   * @default - [m7i.large] for x86_64, [m7g.large] for arm64
   */
  readonly buildInstanceTypes?: ec2.InstanceType[];
  /**
   * VPC the build instance runs in; it needs outbound access to the runner package's URL and to dnf's mirrors.
   * @default - the account's default VPC (Image Builder's choice)
   */
  readonly vpc?: ec2.IVpc;
  /**
   * Subnets of `vpc` for the build instance (the first one is used).
   * @default - the VPC's private subnets with egress
   */
  readonly vpcSubnets?: ec2.SubnetSelection;
}

/**
 * Builds the runner AMI with EC2 Image Builder: Amazon Linux 2023 plus the runner installed by
 * the same install step the boot script runs (`renderInstallScript`, one source rendered twice),
 * then the team's own `steps` (components, shell, Docker, CA certificates), on a schedule, and publishes each AMI id to an SSM parameter of data type `aws:ec2:image`.
 *
 * Pools take it with `machineImage: image.machineImage()`: their launch templates resolve the
 * parameter at each launch, and the pool Lambda evicts parked instances whose image is no
 * longer the parameter's value. Until the first build the parameter holds the stock Amazon
 * Linux 2023 AMI (the boot then installs the runner while priming), so pools work from the
 * first deployment.
 *
 * `cdk destroy` removes every resource it creates, the parameter included; the AMIs and
 * snapshots the pipeline builds are Image Builder's output, not CloudFormation resources,
 * and stay (docs/image.md says how to remove them).
 */
export class RunnerImage extends Construct implements iam.IGrantable {
  /** Name of the SSM parameter that holds the current AMI id. */
  readonly parameterName: string;
  /** The architecture the image is built for; pools that use it must have instance types of it. */
  readonly architecture: RunnerImageArchitecture;
  /** Role of the build instance. */
  readonly role: iam.Role;
  readonly grantPrincipal: iam.IPrincipal;
  /** The install step's component (the first of the recipe). */
  readonly component: imagebuilder.CfnComponent;
  /** The components created for `steps` (shell, Docker, CA certificates), in order; ARNs given are not among them. */
  readonly stepComponents: imagebuilder.CfnComponent[] = [];
  readonly recipe: imagebuilder.CfnImageRecipe;
  readonly pipeline: imagebuilder.CfnImagePipeline;
  /** The install step as the component runs it (also in the component document). */
  readonly installScript: string;
  /** Creates the parameter (the stock image until the first build); fleets using the image deploy after it. */
  private readonly seed: cr.AwsCustomResource;
  /** The runner release the image carries. */
  readonly runnerPackage: RunnerPackage;

  constructor(scope: Construct, id: string, props: RunnerImageProps) {
    super(scope, id);
    const architecture = props.architecture ?? RunnerImageArchitecture.X86_64;
    this.architecture = architecture;
    this.runnerPackage = props.runnerPackage ?? DEFAULT_RUNNER_PACKAGES[props.provider];
    const arch = ARCHITECTURES[architecture];
    const schedule = props.schedule ?? events.Schedule.cron({ weekDay: 'SUN', hour: '3', minute: '0' });
    validateRunnerImageProps(props, architecture, schedule);
    const stack = Stack.of(this);
    const name = `${DEFAULT_PREFIX}-${props.provider}-${architecture}-${createHash('sha256').update(this.node.addr).digest('hex').slice(0, 8)}`;
    this.parameterName = props.parameterName ?? `/${DEFAULT_PREFIX}/images/${name}`;

    const options: UserDataOptions = {
      provider: props.provider,
      ...(props.runnerPackage ? { runnerPackage: props.runnerPackage } : {}),
      ...(props.runnerUser ? { runnerUser: props.runnerUser } : {}),
      ...(props.runnerDirectory ? { runnerDir: props.runnerDirectory } : {}),
    };
    this.installScript = renderInstallScript(options);
    const document = installComponentDocument(this.installScript);
    // Components and recipes are immutable per version: a new script is a new version.
    const version = contentVersion(document, arch.managedImage);

    this.component = new imagebuilder.CfnComponent(this, 'InstallComponent', {
      name: `${name}-install`,
      description: `Installs the ${props.provider} runner (cdk-warm-runners' install step)`,
      platform: 'Linux',
      supportedOsVersions: ['Amazon Linux 2023'],
      version,
      data: document,
    });
    // The team's steps, after the install step: the Docker step needs the runner user it creates.
    const stepArns: string[] = [];
    const identities: string[] = [];
    const assets: s3assets.Asset[] = [];
    (props.steps ?? []).forEach((step, i) => {
      const bound = step._bind({ installOptions: options });
      if (bound.document === undefined) {
        if (bound.componentArn === undefined) throw new Error(`RunnerImage: steps[${i}] names no component`);
        stepArns.push(bound.componentArn);
        identities.push(JSON.stringify(stack.resolve(bound.identity ?? bound.componentArn)));
        return;
      }
      if (bound.document.length > COMPONENT_DATA_MAX) {
        throw new Error(
          `RunnerImage: steps[${i}] (${bound.name}) renders a component document of ${bound.document.length} characters, over Image Builder's ${COMPONENT_DATA_MAX}: ` +
            'give long CA bundles as RunnerImageStep.caCertificatesFromAsset, long scripts as a component of your own (RunnerImageStep.component)',
        );
      }
      // An asset's URL is a token: its content hash names the version instead.
      const identity = bound.asset ? bound.document.split(bound.asset.s3ObjectUrl).join(bound.asset.assetHash) : bound.document;
      identities.push(identity);
      const component = new imagebuilder.CfnComponent(this, `Step${i}`, {
        name: `${name}-${i + 1}-${bound.name!.toLowerCase()}`,
        description: bound.description!,
        platform: 'Linux',
        supportedOsVersions: ['Amazon Linux 2023'],
        version: contentVersion(identity),
        data: bound.document,
      });
      if (bound.asset) assets.push(bound.asset);
      this.stepComponents.push(component);
      stepArns.push(component.attrArn);
    });

    this.recipe = new imagebuilder.CfnImageRecipe(this, 'Recipe', {
      name,
      // A new step, or another order, is a new recipe version.
      version: identities.length === 0 ? version : contentVersion(document, arch.managedImage, ...identities),
      // The newest Amazon Linux 2023 image Image Builder manages, at every build.
      parentImage: `arn:${Aws.PARTITION}:imagebuilder:${Aws.REGION}:aws:image/${arch.managedImage}/x.x.x`,
      components: [this.component.attrArn, ...stepArns].map((componentArn) => ({ componentArn })),
    });

    // What Image Builder requires of the build instance's role (Image Builder user guide,
    // "Prerequisites"): EC2InstanceProfileForImageBuilder (its logs, its component downloads)
    // and AmazonSSMManagedInstanceCore (Image Builder drives the build through SSM). Nothing else.
    this.role = new iam.Role(this, 'InstanceRole', {
      assumedBy: new iam.ServicePrincipal('ec2.amazonaws.com'),
      description: `Image Builder build instance of ${name}`,
      managedPolicies: IMAGE_BUILDER_POLICIES.map((policy) => iam.ManagedPolicy.fromAwsManagedPolicyName(policy)),
    });
    // AmazonSSMManagedInstanceCore allows ssm:GetParameter(s) on every parameter, and the build
    // runs downloaded code: it must not read the fleet's CI secrets (Parameter Store). Only
    // AWS's public parameters stay readable.
    this.role.addToPolicy(
      new iam.PolicyStatement({
        effect: iam.Effect.DENY,
        actions: ['ssm:GetParameter', 'ssm:GetParameters', 'ssm:GetParametersByPath', 'ssm:GetParameterHistory'],
        notResources: [`arn:${Aws.PARTITION}:ssm:*::parameter/aws/service/*`, `arn:${Aws.PARTITION}:ssm:*:*:parameter/aws/service/*`],
      }),
    );
    this.grantPrincipal = this.role;
    // A step's asset (a CA bundle): the build reads that object, nothing else of the bucket.
    for (const asset of assets) asset.grantRead(this.role);
    for (const policy of IMAGE_BUILDER_POLICIES) {
      acknowledgeManagedPolicy(this.role, policy, 'Image Builder requires this AWS managed policy on the build instance role (Image Builder user guide, prerequisites)');
    }
    const profile = new iam.InstanceProfile(this, 'InstanceProfile', { role: this.role });

    const network = props.vpc ? buildNetwork(this, props.vpc, props.vpcSubnets) : undefined;
    const infrastructure = new imagebuilder.CfnInfrastructureConfiguration(this, 'Infrastructure', {
      name,
      instanceProfileName: profile.instanceProfileName,
      instanceTypes: (props.buildInstanceTypes ?? [new ec2.InstanceType(arch.instanceType)]).map((t) => t.toString()),
      terminateInstanceOnFailure: true,
      instanceMetadataOptions: { httpTokens: 'required', httpPutResponseHopLimit: 2 },
      ...(network ?? {}),
    });

    const distribution = new imagebuilder.CfnDistributionConfiguration(this, 'Distribution', {
      name,
      distributions: [
        {
          region: stack.region,
          // A JSON pass-through: CloudFormation's own (capitalised) keys.
          amiDistributionConfiguration: { Name: `${name}-{{ imagebuilder:buildDate }}`, Description: `cdk-warm-runners ${props.provider} runner image` },
          // Image Builder writes the new AMI id here after each build (it updates an existing parameter).
          ssmParameterConfigurations: [{ parameterName: this.parameterName, dataType: 'aws:ec2:image' }],
        },
      ],
    });

    this.pipeline = new imagebuilder.CfnImagePipeline(this, 'Pipeline', {
      name,
      description: `Builds the ${props.provider} runner image (${architecture}) on a schedule`,
      imageRecipeArn: this.recipe.attrArn,
      infrastructureConfigurationArn: infrastructure.attrArn,
      distributionConfigurationArn: distribution.attrArn,
      schedule: { scheduleExpression: schedule.expressionString, pipelineExecutionStartCondition: 'EXPRESSION_MATCH_ONLY' },
      status: 'ENABLED',
    });

    // The parameter is created here (stock AL2023 until the first build) and deleted on
    // destroy, so it is a stack resource although Image Builder writes it afterwards.
    // Created once: an update must not overwrite a built AMI with the stock one.
    const stock = ec2.MachineImage.fromSsmParameter(arch.stockParameter).getImage(this).imageId;
    const parameterArn = stack.formatArn({ service: 'ssm', resource: 'parameter', resourceName: this.parameterName.replace(/^\//, '') });
    const seed = new cr.AwsCustomResource(this, 'Parameter', {
      onCreate: {
        service: 'SSM',
        action: 'putParameter',
        parameters: { Name: this.parameterName, Value: stock, Type: 'String', DataType: 'aws:ec2:image', Overwrite: false },
        physicalResourceId: cr.PhysicalResourceId.of(this.parameterName),
        ignoreErrorCodesMatching: 'ParameterAlreadyExists',
      },
      onDelete: {
        service: 'SSM',
        action: 'deleteParameter',
        parameters: { Name: this.parameterName },
        ignoreErrorCodesMatching: 'ParameterNotFound',
      },
      policy: cr.AwsCustomResourcePolicy.fromStatements([
        new iam.PolicyStatement({ actions: ['ssm:PutParameter', 'ssm:DeleteParameter'], resources: [parameterArn] }),
        // Parameter Store checks an aws:ec2:image value with the writer's ec2:DescribeImages
        // (Systems Manager user guide, "Native parameter support for Amazon Machine Image IDs").
        new iam.PolicyStatement({ actions: ['ec2:DescribeImages'], resources: ['*'] }),
      ]),
      installLatestAwsSdk: false,
    });
    acknowledgeWildcard(seed, '*', 'ec2:DescribeImages has no resource-level permissions; Parameter Store needs it to accept an aws:ec2:image value');
    // The provider framework's one function per stack that AwsCustomResource shares.
    const provider = stack.node.tryFindChild(AWS_CUSTOM_RESOURCE_SINGLETON)?.node.tryFindChild('ServiceRole');
    if (provider) {
      acknowledgeManagedPolicy(provider, 'service-role/AWSLambdaBasicExecutionRole', 'AwsCustomResource\'s shared function (RunnerImage\'s parameter) writes its logs with the AWS managed basic execution policy; CDK creates the role');
    }
    // Deleted after the pipeline, so no build publishes into a deleted name during destroy.
    this.pipeline.node.addDependency(seed);
    this.seed = seed;
  }

  /**
   * The image for a pool's `machineImage`: the launch template resolves the parameter at each
   * launch (`resolve:ssm:`), and the pool evicts parked instances built from an older image.
   */
  machineImage(): ec2.IMachineImage {
    // Built on Amazon Linux 2023 (the parent image above): its root device is /dev/xvda.
    return new ParameterMachineImage(this.parameterName, ec2.OperatingSystemType.LINUX, this.seed, '/dev/xvda', this.architecture, this.runnerPackage);
  }
}

/**
 * The install component's document: one ExecuteBash step whose one command is the rendered
 * install script, whole. Image Builder runs the commands of a step as one bash script, so the
 * script runs as the boot runs it; JSON is YAML, and it keeps the script byte for byte.
 */
export function installComponentDocument(script: string): string {
  if (script.includes('{{')) throw new Error('the install script holds "{{", which Image Builder would read as a variable');
  const document = JSON.stringify({
    name: 'cdk-warm-runners install step',
    description: 'The runner user and the pinned runner release (templates/install-runner.sh)',
    schemaVersion: '1.0',
    phases: [{ name: 'build', steps: [{ name: INSTALL_STEP_NAME, action: 'ExecuteBash', onFailure: 'Abort', inputs: { commands: [script] } }] }],
  });
  // The schema version is the number 1.0 in Image Builder's examples; JSON.stringify would write 1.
  // The script's own quotes are escaped, so this text occurs once.
  return document.replace('"schemaVersion":"1.0"', '"schemaVersion":1.0');
}

/** A semantic version derived from the content: Image Builder refuses to change a version in place. */
function contentVersion(...parts: string[]): string {
  const digest = createHash('sha256').update(parts.join('\0')).digest();
  return `1.${digest.readUInt32BE(0) % 1_000_000}.${digest.readUInt32BE(4) % 1_000_000}`;
}

function buildNetwork(scope: Construct, vpc: ec2.IVpc, selection: ec2.SubnetSelection | undefined): { subnetId: string; securityGroupIds: string[] } {
  const subnets = vpc.selectSubnets(selection ?? { subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS }).subnetIds;
  if (subnets.length === 0) throw new Error('RunnerImage: vpcSubnets selects no subnet of vpc; choose subnets with outbound access');
  const group = new ec2.SecurityGroup(scope, 'SecurityGroup', {
    vpc,
    description: 'Image Builder build instance of a runner image: no ingress; egress for the runner download and dnf',
    allowAllOutbound: true,
  });
  return { subnetId: subnets[0]!, securityGroupIds: [group.securityGroupId] };
}

function validateRunnerImageProps(props: RunnerImageProps, architecture: RunnerImageArchitecture, schedule: events.Schedule): void {
  const problems: string[] = [];
  if (!Object.values(Provider).includes(props.provider)) problems.push(`provider "${String(props.provider)}" must be Provider.GITHUB or Provider.GITLAB`);
  if (!Object.values(RunnerImageArchitecture).includes(architecture)) {
    problems.push(`architecture "${String(architecture)}" must be RunnerImageArchitecture.X86_64 or RunnerImageArchitecture.ARM64`);
  }
  if (!Token.isUnresolved(schedule.expressionString) && !schedule.expressionString.startsWith('cron(')) {
    problems.push(`schedule "${schedule.expressionString}" must be a cron expression (events.Schedule.cron): Image Builder takes no rate()`);
  }
  const name = props.parameterName;
  if (name !== undefined && !Token.isUnresolved(name) && !/^\/[A-Za-z0-9_.\-/]{1,1010}$/.test(name)) {
    problems.push(`parameterName "${name}" must be an SSM path such as "/ci/images/github-x86_64" (letters, digits, "_", ".", "-", "/")`);
  }
  if (props.buildInstanceTypes !== undefined && props.buildInstanceTypes.length === 0) problems.push('buildInstanceTypes is empty: give at least one type, or leave it out');
  // A build instance of another architecture boots no image of this one: the build fails after deploy.
  const known = Object.values(RunnerImageArchitecture).includes(architecture);
  const foreign = (known ? (props.buildInstanceTypes ?? []) : []).filter((t) => (instanceTypeArchitecture(t) ?? architecture) !== architecture);
  if (foreign.length > 0) {
    problems.push(
      `buildInstanceTypes ${foreign.map((t) => `${t.toString()} (${instanceTypeArchitecture(t)})`).join(', ')} must be ${architecture} instance types, as architecture is ${architecture}: ` +
        `give ${architecture} types (such as ${ARCHITECTURES[architecture].instanceType}), or leave buildInstanceTypes out`,
    );
  }
  if (problems.length > 0) throw new Error(`RunnerImage: ${problems.join('; ')}`);
}
