/**
 * The contract between the control plane (Lambdas, constructs, local sandbox) and the
 * instances (the rendered boot script). Every tag key, SSM path, boot mode and message
 * format is defined here once.
 */
export * from './names';
export * from './tags';
export * from './instance-tags';
export * from './ssm-paths';
export * from './boot';
export * from './job-message';
export * from './job-record';
export * from './ci-provider';
export * from './metrics';
export * from './ledger';
export * from './warm-schedule';
export * from './fleet-config';
export * from './github-scope';
export * from './lambda-env';
export * from './runner-packages';
export * from './runner-release';
export * from './reuse';
export * from './gitlab-scope';
export * from './scale-set';
export * from './scale-set-pools';
