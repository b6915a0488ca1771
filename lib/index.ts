export * from './props';
export * from './warm-runners';
export * from './runner-fleet';
export { RunnerPool } from './runner-pool';
export * from './job-queue';
export * from './job-records';
export * from './reconciler';
export * from './bundled-function';
export * from './fleet-drain';
export * from './user-data';
export * from './runner-user-data';
// The contract's types that the constructs' props and properties use: jsii needs them exported.
export { GitLabRunnerType, GitLabWebhookOwner, LabelMatch, Provider, ReuseScope } from '../lambdas/shared/contract';
export type {
  FleetConfig,
  FleetMetricsConfig,
  FleetParameterNames,
  GitHubConnectionConfig,
  GitHubParameterNames,
  GitLabConnectionConfig,
  GitLabParameterNames,
  GitLabWebhookConfig,
  MetricDimensions,
  MetricNames,
  PoolConfig,
  PoolReuseConfig,
  PoolScaleSetConfig,
  PoolWarmConfig,
  RunnerPackage,
  RunnerPackageDownload,
  WarmScheduleEntry,
} from '../lambdas/shared/contract';
export { RunnerVersion } from './runner-version';
export * from './runner-image';
// The step class only: its document helpers are internal.
export { RunnerImageStep } from './runner-image-steps';
export * from './parameter-machine-image';
export { WebhookExposure, WebhookExposureKind } from './webhook-exposure';
export type { ApiGatewayWebhookProps } from './webhook-exposure';
