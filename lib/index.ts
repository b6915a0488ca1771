export * from './props';
export * from './warm-runners';
export * from './runner-fleet';
export * from './job-queue';
export * from './bundled-function';
export * from './fleet-config-input';
export * from './user-data';
export type { FleetConfig, PoolConfig, WarmScheduleEntry, Provider, LabelMatch, GitLabRunnerType } from '../lambdas/shared/contract';
