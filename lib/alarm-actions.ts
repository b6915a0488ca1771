import type { IAspect } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import type { IConstruct } from 'constructs';

/**
 * Adds the fleet's alarm actions to every alarm in the tree it is applied to. An aspect runs at
 * synthesis, so an alarm added after the constructor (by a later part of the library, or by the
 * user under the construct) gets the actions too, and no alarm can be created without them.
 */
export class AlarmActions implements IAspect {
  constructor(private readonly actions: cloudwatch.IAlarmAction[]) {}

  visit(node: IConstruct): void {
    if (node instanceof cloudwatch.AlarmBase) node.addAlarmAction(...this.actions);
  }
}
