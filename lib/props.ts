import type { Duration, Size } from 'aws-cdk-lib';
import type * as ec2 from 'aws-cdk-lib/aws-ec2';
import type * as iam from 'aws-cdk-lib/aws-iam';
import type { RunnerVersion } from './runner-version';
import type { GitLabRunnerType, LabelMatch, Provider, ReuseScope, RunnerPackage, WarmScheduleEntry } from '../lambdas/shared/contract';

/** A GitHub App the fleet registers its runners through. */
export interface GitHubConnectionProps {
  /** The GitHub App's id (not secret; its private key goes into the SSM parameter the stack outputs). */
  readonly appId: string;
  /**
   * Ids of further GitHub Apps, installed on the same organisation or repositories as `appId`,
   * whose rate limits share the load: each GitHub call goes to the App with the most of its
   * limit left (docs/github.md#several-apps). Each App's private key goes into its own SSM
   * parameter, `/<prefix>/ci/github/apps/<appId>/private-key` (the stack's `SecretParameters`
   * output lists them); `appId`'s keeps its parameter. Only `appId`'s App needs the webhook.
   * @default - none: one App
   */
  readonly additionalAppIds?: string[];
  /**
   * Organisation whose runners the fleet registers (organisation-level runners).
   * @default - repository-level runners for `repositories`
   */
  readonly organization?: string;
  /**
   * "owner/repo" names, for repository-level runners when no organisation is given. Setting
   * both `organization` and `repositories` is an error.
   * @default - none; `organization` is then required, unless every GitHub pool names its own
   */
  readonly repositories?: string[];
  /**
   * Enterprise (slug) at which the runners register instead (enterprise-level runners, usable by
   * every organisation of the enterprise that their runner group allows). GitHub's enterprise
   * runner endpoints accept only a classic personal access token with `manage_runners:enterprise`,
   * which goes into the SSM parameter `/<prefix>/ci/github/enterprise-token` (listed in the stack's `SecretParameters` output)
   * (docs/github.md, "Enterprise runners"). The jobs still come from `organization` or
   * `repositories`, where the App is installed.
   * @default - none: runners register at the organisation or repository
   */
  readonly enterprise?: string;
  /**
   * Runner group id for organisation-level runners. Must stay 1 while a pool registers at an
   * enterprise (`enterprise`): enterprise runner groups have ids of their own.
   * @default 1 (GitHub's default group)
   */
  readonly runnerGroupId?: number;
  /**
   * REST API URL, for GitHub Enterprise Server.
   * @default 'https://api.github.com'
   */
  readonly apiUrl?: string;
}

/** A GitLab instance the fleet creates runners at. */
export interface GitLabConnectionProps {
  /** URL of the GitLab instance, for example "https://gitlab.com" or a self-managed URL. */
  readonly url: string;
  /**
   * Scope of the runners the fleet creates; a pool's `gitlabGroupId` or `gitlabProjectId`
   * overrides it for that pool.
   * @default GitLabRunnerType.INSTANCE
   */
  readonly runnerType?: GitLabRunnerType;
  /**
   * Group id for GitLabRunnerType.GROUP runners, project id for GitLabRunnerType.PROJECT runners.
   * @default - none; required unless runnerType is GitLabRunnerType.INSTANCE
   */
  readonly scopeId?: number;
  /**
   * Id of the GitLab webhook that delivers the Job Hooks (Settings > Webhooks shows it), so the
   * reconciler can resend its failed events (GitLab 17.4 or later; the token needs the
   * Maintainer role on a project hook, Owner on a group hook). Its owner is the runner scope's
   * group or project unless `webhookProjectId` or `webhookGroupId` names another.
   * @default - none: failed events are not resent; the pending-jobs scan still finds their jobs
   */
  readonly webhookId?: number;
  /**
   * The project whose webhook `webhookId` is (required for instance runners with a project hook).
   * @default - the runner scope's project or group
   */
  readonly webhookProjectId?: number;
  /**
   * The group whose webhook `webhookId` is (required for instance runners with a group hook).
   * @default - the runner scope's project or group
   */
  readonly webhookGroupId?: number;
  /**
   * Projects whose pending jobs the reconciler lists (`GET /projects/:id/jobs?scope[]=pending`).
   * @default - every pool scope's: the project of a project runner, the group's projects
   * (with subgroups) of a group runner, none for instance runners
   */
  readonly reconcileProjectIds?: number[];
}

/** Warm pool settings of one runner pool. */
export interface WarmPoolProps {
  /**
   * Number of parked (pre-booted, stopped) instances to keep.
   * @default 0 (no warm pool: every job launches cold)
   */
  readonly size?: number;
  /**
   * Sizes that apply in UTC time windows, for example
   * `[{ window: 'MON-FRI 07:00-19:00', size: 5 }]`; outside every window `size` applies.
   * Where windows overlap the first in the list wins: synth refuses a window that lies wholly
   * in earlier ones (it would never apply) and warns where windows of different sizes overlap
   * (docs/operations.md, "Overlapping pools and schedule windows").
   * @default - no schedule
   */
  readonly schedule?: WarmScheduleEntry[];
  /**
   * A parked instance older than this is replaced, so images and packages stay fresh.
   * @default Duration.hours(24)
   */
  readonly maxAge?: Duration;
  /**
   * A warm instance that has not parked after this long is evicted. Less than 55 minutes: a
   * launch of a template not yet proven, or failing, holds its launch ticket for this plus 5 minutes, which
   * must stay below a job's 60-minute maximum wait.
   * @default Duration.minutes(15)
   */
  readonly primingTimeout?: Duration;
  /**
   * Prime failures in a row (standbys that did not park within `primingTimeout`) after which
   * the pool stops relaunching and only probes one standby per `primeBackoffCap`, with the
   * `PrimeBackoff` alarm on; it resumes by itself when a standby primes again or the launch
   * template version changes. Until a standby of a launch template version has primed, at
   * most this many prime at once. From 1 to 100.
   * @default 3
   */
  readonly primeFailureLimit?: number;
  /**
   * The longest delay between launches of a pool whose standbys fail to prime: the delay
   * doubles from one minute after each failure in a row and is this from the
   * `primeFailureLimit`-th on, so such a pool launches at most
   * `primeFailureLimit + 1 hour / primeBackoffCap` standbys an hour. From 1 minute to 24 hours.
   * @default Duration.hours(1)
   */
  readonly primeBackoffCap?: Duration;
  /**
   * Deprecated name of the pool's `prepareCommands` (the same list; setting both is an error).
   * @deprecated Use `RunnerPoolProps.prepareCommands`: they run on cold launches too. Setting
   * both is an error.
   * @default - none
   */
  readonly prepareCommands?: string[];
}

/**
 * Opt-in reuse of a finished instance for the next job of the same repository (GitHub) or
 * project (GitLab), with its cache directories (docs/boot-modes.md, "Reuse"; what a later job
 * can observe of an earlier one: docs/security.md). Parked reused instances count against the
 * pool's `warm.size`: without a warm pool the pool evicts each one on its next run. The caches
 * live on the root volume, whose size `diskSize` fixes (docs/operations.md, "Reuse: cached
 * volumes").
 */
export interface PoolReuseProps {
  /**
   * Who shares an instance's caches. Only the narrowest scope of each provider is offered.
   * @default ReuseScope.REPOSITORY for GitHub pools, ReuseScope.PROJECT for GitLab pools
   */
  readonly scope?: ReuseScope;
  /**
   * Activations one instance serves at most (each job, and each activation whose idle runner
   * was idle-stopped, counts one); after the last it terminates instead of parking.
   * @default 10
   */
  readonly maxJobs?: number;
  /**
   * Age (from launch) after which an instance terminates instead of parking again, and the
   * pool evicts it if parked. For an instance that served a job this bound replaces
   * `warm.maxAge`, which bounds the fresh standbys.
   * @default Duration.hours(24)
   */
  readonly maxAge?: Duration;
  /**
   * Absolute directories that survive from one job to the next (a Docker image store, a tool
   * cache, a dependency cache). Everything else the job touched is removed before the
   * instance parks: workspace, the runner's registration, the job's processes, temp files, the
   * runner user's home outside these directories. At most 16, 512 bytes in all: they travel in
   * the user data (16 KB gzipped, mostly the boot script); list a common parent instead of many.
   * @default - none: only the runner installation and the prepared image survive
   */
  readonly cacheDirectories?: string[];
}

/** Which gitlab-runner executor runs a GitLab pool's jobs. */
export enum GitLabExecutor {
  /** Each job in a container of its `image:` (the pool's `docker.image` when it names none), with its `services:`. */
  DOCKER = 'docker',
  /** Each job directly on the instance, as the runner user (`image:` and `services:` are ignored). */
  SHELL = 'shell',
}

/** When the docker executor pulls a job's image (gitlab-runner's `pull_policy`). */
export enum DockerPullPolicy {
  /** Pull every time (gitlab-runner's own default). */
  ALWAYS = 'always',
  /** Use the image on the instance when it is there: with reuse or a prepared image, the image store is the cache. */
  IF_NOT_PRESENT = 'if-not-present',
  /** Never pull: only images already on the instance (baked, or pulled by `prepareCommands`). */
  NEVER = 'never',
}

/**
 * Docker on a pool's instances, for container jobs: GitHub `container:` and `services:`,
 * GitLab's docker executor (docs/docker.md). The boot installs it from the distribution's
 * packages while priming (a cold launch before its runner starts; an image that has it skips
 * the install), enables the daemon, adds the runner user to the `docker` group and waits for
 * the daemon to answer before the instance may park. A warm job never pays any of it.
 */
export interface PoolDockerProps {
  /**
   * GitLab pools: the executor. Ignored for GitHub pools (the Actions runner uses the docker
   * CLI for `container:` and `services:` by itself).
   * @default GitLabExecutor.DOCKER
   */
  readonly gitlabExecutor?: GitLabExecutor;
  /**
   * The docker executor's image for jobs that name none (`--docker-image`).
   * @default 'alpine:3'
   */
  readonly image?: string;
  /**
   * Run the docker executor's containers privileged (`--docker-privileged`): needed for
   * Docker-in-Docker, and gives a job root on the instance. Off unless asked.
   * @default false
   */
  readonly privileged?: boolean;
  /**
   * The docker executor's pull policy (`--docker-pull-policy`).
   * @default DockerPullPolicy.IF_NOT_PRESENT: images on the instance (pulled while priming, or kept by reuse) are used
   */
  readonly pullPolicy?: DockerPullPolicy;
  /**
   * Volumes the docker executor mounts into every job container (`--docker-volumes`), as
   * `/path` (a volume) or `/host/path:/path[:ro]`. At most 8, 512 bytes in all: they travel in
   * the user data (16 KB gzipped, mostly the boot script), and a real mount (`/cache`, the Docker
   * socket) takes a few dozen.
   * @default - none
   */
  readonly volumes?: string[];
}

/** One pool of runners: a label set, an instance shape, and an optional warm pool. */
export interface RunnerPoolProps {
  /** Pool name: letters, digits, "_" and "-"; used in tags, runner names and metric dimensions. */
  readonly name: string;
  /** The CI connection the pool serves; that connection must be configured. */
  readonly provider: Provider;
  /**
   * GitHub labels (besides "self-hosted", which every GitHub runner has) or GitLab tags a job must ask for.
   * @default - the pool's name
   */
  readonly labels?: string[];
  /**
   * EXACT: the job's labels equal the pool's; SUBSET: the job's labels are a subset. When
   * several pools match a job, the one with the fewest labels the job did not ask for takes it,
   * then the first in `pools`: synth refuses a pool that could never get a job and warns where
   * the order of `pools` decides (docs/operations.md, "Overlapping pools and schedule windows").
   * @default LabelMatch.EXACT
   */
  readonly labelMatch?: LabelMatch;
  /**
   * GitLab: let the runner pick jobs without tags.
   * @default false
   */
  readonly runUntagged?: boolean;
  /**
   * GitHub: take only jobs whose `runs-on` includes "self-hosted". GitHub does not require that
   * label (a job asking for `[linux, x64]` runs on any runner labelled so); turn this on to keep
   * jobs that do not name it away from the pool.
   * @default false
   */
  readonly requireSelfHostedLabel?: boolean;
  /**
   * GitHub: the organisation whose jobs the pool takes and where its runners register (the App
   * must be installed there), for a fleet serving several organisations. Setting both
   * `organization` and `repositories` on a pool is an error; GitLab pools take neither.
   * @default - the connection's `github.organization` (or its `repositories`)
   */
  readonly organization?: string;
  /**
   * GitHub: "owner/repo" names whose jobs the pool takes, each runner registered at its job's
   * repository.
   * @default - the connection's `github.repositories` (or its `organization`)
   */
  readonly repositories?: string[];
  /**
   * GitHub: the enterprise (slug) the pool's runners register at instead of the organisation or
   * repository (its jobs still come from `organization`/`repositories`). Needs the enterprise
   * token parameter (docs/github.md, "Enterprise runners").
   * @default - the connection's `github.enterprise`, else none
   */
  readonly enterprise?: string;
  /**
   * GitLab: register the pool's runners as group runners of this group (`group_type`), so one
   * fleet serves several groups (docs/gitlab.md, "Several groups or projects"). The token needs
   * the Owner role there. Not together with `gitlabProjectId`; GitLab pools only.
   * @default - the connection's `runnerType` and `scopeId`
   */
  readonly gitlabGroupId?: number;
  /**
   * GitLab: register the pool's runners as project runners of this project (`project_type`): the
   * pool then takes only this project's jobs. The token needs the Maintainer role there. Not
   * together with `gitlabGroupId`; GitLab pools only.
   * @default - the connection's `runnerType` and `scopeId`
   */
  readonly gitlabProjectId?: number;
  /**
   * GitLab: the id of the webhook of the pool's group or project (its `gitlabGroupId` or
   * `gitlabProjectId`, else the connection's scope), whose failed events the reconciler resends,
   * as the connection's `webhookId`; a hook several pools name is read once.
   * @default - none: only the connection's webhook is resent from
   */
  readonly gitlabWebhookId?: number;
  /**
   * GitHub: make the pool a runner scale set of this name (docs/scale-set.md): workflows put
   * the name in `runs-on`, GitHub assigns those jobs to the scale set, and the fleet's listener
   * (a Lambda run every minute) reads the scale set's demand and starts runners for it, parked
   * standbys first. The construct creates the scale set on deploy and deletes it on destroy.
   * 1-45 characters of letters, digits, "_", "." or "-"; unique per organisation or repository.
   * The pool's scope must be an organisation or exactly one repository, not an enterprise; no
   * `reuse`. The webhook and the reconciler leave the scale set's jobs alone, and a fleet whose
   * GitHub pools are all scale sets (and that has no GitLab pool) gets no webhook endpoint.
   * `maxRunners` 0 pauses it as any pool (the scale set stays; its jobs wait at GitHub).
   * @default - none: the pool's jobs come from webhooks and the reconciler
   */
  readonly scaleSetName?: string;
  /**
   * GitHub: the runner group, by name, the pool's scale set belongs to (`scaleSetName` only).
   * @default "Default"
   */
  readonly scaleSetRunnerGroup?: string;
  /**
   * Instance types, in order of preference.
   * @default - [m7i.large]
   */
  readonly instanceTypes?: ec2.InstanceType[];
  /**
   * The AMI: Amazon Linux 2023 (x86_64 or arm64), Ubuntu 22.04 or 24.04, or alike, with curl and
   * dnf or apt-get (the boot installs the aws CLI where it is missing: docs/boot-modes.md). When it
   * lacks the runner (GitHub actions-runner's run.sh, or gitlab-runner) or the runner user, the
   * boot installs them from `runnerPackage` (a warm standby while priming, a cold launch before
   * its runner starts); an AMI that has them skips that step.
   */
  readonly machineImage: ec2.IMachineImage;
  /**
   * Root volume size.
   * @default Size.gibibytes(30)
   */
  readonly diskSize?: Size;
  /**
   * Role of the pool's instances (its launch template carries an instance profile of it), for a
   * pool kept apart from the others: grant it what this pool's jobs need
   * (`bucket.grantRead(runners.pool('deploy'))`). It must be assumable by `ec2.amazonaws.com`
   * and be of the stack's account. The construct adds the instance's own grants to it, scoped to
   * this pool's instances (read and delete its own config parameter, tag and terminate only
   * itself, write its boot log: docs/security.md, "Per-pool isolation"). An imported role
   * (`Role.fromRoleArn`) gets them as a policy of this stack; one imported with
   * `mutable: false` gets none: synth warns, and you attach `runners.pool(name).instanceStatements` yourself.
   * @default - the fleet's shared role (`WarmRunners.grantPrincipal`), shared by every pool that sets none
   */
  readonly instanceRole?: iam.IRole;
  /**
   * Security groups of the pool's instances, in the fleet's VPC (`runners.pool(name).connections`
   * opens them to what the pool's jobs reach).
   * @default - the fleet's shared security group (`WarmRunners.connections`: no ingress, all egress), shared by every pool that sets none
   */
  readonly securityGroups?: ec2.ISecurityGroup[];
  /**
   * Subnets of the fleet's VPC the pool's instances launch in (warm standbys and cold launches).
   * @default - the fleet's `vpcSubnets`
   */
  readonly vpcSubnets?: ec2.SubnetSelection;
  /**
   * Use spot capacity (cold launches fall back to on-demand when spot capacity is short).
   * @default false
   */
  readonly spot?: boolean;
  /**
   * Most runners the pool runs at once, warm and cold together (activated or cold instances
   * pending, running or stopping; parked standbys do not count). A job that finds the pool full
   * waits in the queue and looks again after a back-off, up to its maximum wait (1 hour), then
   * goes to the dead-letter queue.
   *
   * A soft limit in a burst: each scale-up invocation counts the pool's runners once
   * (DescribeInstances) and then starts up to its batch, so invocations running at once do not
   * see each other's launches. With `scaleUpMaxConcurrency` C and `scaleUpBatchSize` B the pool
   * can reach `maxRunners + (C - 1) x min(B, maxRunners)` (50 with the defaults: 10 + 4 x 10),
   * and more only while EC2's eventually consistent DescribeInstances has not yet shown a
   * launch to a later invocation. Launch tickets bound only the launches of a template that is
   * unproven or failing (`warm.primeFailureLimit`), not this count. Lower C or B to tighten it.
   *
   * 0 pauses the pool: no job starts (not even on a parked standby), parked standbys are
   * evicted on the pool's next run and none are launched; its jobs wait as above. The warm
   * settings may stay as they are for when it resumes.
   * @default 10
   */
  readonly maxRunners?: number;
  /**
   * A runner instance without a job for this long is terminated.
   * @default Duration.minutes(15)
   */
  readonly idleTimeout?: Duration;
  /**
   * How far apart the two readings of the CI service must be that both find a runner idle
   * before the idle rule deregisters it: one stale or wrong reading (GitHub has reported
   * `busy: false` mid-job) cannot end a job. A runner whose instance reported that its job
   * started is not reclaimed as idle for `maxJobDuration` from that report, whatever the readings say.
   * @default Duration.minutes(2)
   */
  readonly idleConfirmation?: Duration;
  /**
   * How long an instance's report that its job started keeps the idle rule away from its
   * runner. Past it, two idle readings a window apart reclaim the instance again: one whose
   * runner ended but which outlived its job (its self-termination failed, it rebooted mid-job,
   * or its GitLab registration stays listed) is not kept forever. Set it above the longest
   * job the pool runs.
   * @default Duration.hours(6)
   */
  readonly maxJobDuration?: Duration;
  /**
   * Shell commands run as root once per instance, after the install step and before the
   * runner may take a job (pull images, warm caches, install tools): a warm standby runs them
   * while priming (off the job's path), a cold launch before RUN or WAIT (the job waits for
   * them), so a job sees the same machine warm or cold. A reused instance does not run them
   * again (docs/boot-modes.md, "Prepare commands"). A failing one fails the PRIME (the standby
   * does not park) or the cold boot (the instance terminates; the job's retry check gives it
   * another runner). At most 16, 1024 bytes in all: they travel in the user data
   * (gzip-compressed, limited to 16 KB by EC2), so put longer preparation into the image
   * (`RunnerImage` steps). Never put secrets here.
   * @default - none
   */
  readonly prepareCommands?: string[];
  /**
   * Warm pool settings.
   * @default - no warm pool
   */
  readonly warm?: WarmPoolProps;
  /**
   * Reuse of finished instances, with their caches, for later jobs of the same repository
   * or project (off by default).
   * @default - no reuse: every instance serves one job and terminates
   */
  readonly reuse?: PoolReuseProps;
  /**
   * Docker for container jobs (GitHub `container:`/`services:`, GitLab's docker executor).
   * Off by default: it costs every cold launch of a stock image a package install (about
   * 20-40 s on Amazon Linux 2023, an estimate: docs/docker.md) and about 300 MB of disk, and
   * a pool whose jobs run on the host should not carry a root-equivalent daemon. Give `{}`
   * to turn it on with the defaults; with a warm pool the install happens while priming.
   * @default - no Docker; GitLab pools use the shell executor
   */
  readonly docker?: PoolDockerProps;
  /**
   * User the runner runs as on the instance.
   * @default 'runner'
   */
  readonly runnerUser?: string;
  /**
   * The runner release the boot installs when the AMI lacks the runner: version, and for each
   * architecture (x64, arm64) the URL of the GitHub tarball or GitLab binary (https: a mirror or
   * a private bucket) and its SHA-256. A download whose SHA-256 differs is refused and the
   * instance does not park. Set it to move to a newer release than the library's pin
   * (docs/operations.md, "Upgrade without dropping jobs").
   * @default - the library's pinned release for the pool's provider (`DEFAULT_RUNNER_PACKAGES`)
   */
  readonly runnerPackage?: RunnerPackage;
  /**
   * Name of the root device of the pool's image ("/dev/xvda" on Amazon Linux and Debian,
   * "/dev/sda1" on Ubuntu): the pool's root volume (`diskSize`, gp3, encrypted) is mapped to it.
   * A name the image does not use is not refused by EC2: it adds a second, empty volume and
   * the root volume keeps the image's size. Set it for an image whose name the construct
   * cannot know (a generic AMI map, a lookup, an SSM parameter of your own).
   * @default - the image's, where the construct knows it: '/dev/xvda' for Amazon Linux images
   * (`MachineImage.latestAmazonLinux2023()` and the like, SSM parameters under
   * /aws/service/ami-amazon-linux-latest/) and a `RunnerImage`, '/dev/sda1' for Canonical's
   * Ubuntu SSM parameters (/aws/service/canonical/ubuntu/...), '/dev/xvda' for Debian's
   * (/aws/service/debian/...); otherwise the fleet's `rootDeviceName`, else '/dev/xvda'
   */
  readonly rootDeviceName?: string;
  /**
   * Follow the newest runner release (`RunnerVersion.latest()`: resolved hourly by the control
   * plane, parked instances of an older version replaced a few at a time) or keep a pin
   * (`RunnerVersion.pinned()`: `runnerPackage`, else the library's). Applies when the AMI lacks
   * the runner. Latest by default for GitHub, because GitHub refuses a runner 30 days after a
   * newer release came out; pinned by default for GitLab, because gitlab-runner must stay
   * compatible with the GitLab server's version (docs/operations.md, "Runner updates").
   * @default - GitHub pools: RunnerVersion.latest(), or RunnerVersion.pinned() when
   * `runnerPackage` is set; GitLab pools: RunnerVersion.pinned()
   */
  readonly runnerVersion?: RunnerVersion;
  /**
   * Directory the runner is in on the AMI, or the install step puts it (GitHub: the release's
   * tarball unpacked; GitLab: the jobs' builds directory).
   * @default '/opt/actions-runner' for GitHub (holds run.sh), '/opt/gitlab-runner' for GitLab (holds builds/)
   */
  readonly runnerDirectory?: string;
}
