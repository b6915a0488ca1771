#!/usr/bin/env node
import { App } from 'aws-cdk-lib';
import { ExampleRunnersStack } from './example-stack';

const app = new App();
new ExampleRunnersStack(app, 'WarmRunnersExample');
