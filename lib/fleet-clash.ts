import { Stack, Token } from 'aws-cdk-lib';
import type { IConstruct } from 'constructs';

/** What two fleets of one account and region must not share. */
interface FleetIdentity {
  readonly construct: IConstruct;
  readonly prefix: string;
  readonly metricNamespace: string;
}

/** The fleets of each app seen so far, by the app's root construct. */
const fleetsByApp = new WeakMap<IConstruct, FleetIdentity[]>();

/**
 * Refuses a second fleet of the same app that would deploy to the same account and region with
 * the prefix or the metric namespace of one already built: with one prefix the two would share
 * SSM paths and tag keys (each would reclaim the other's instances), with one namespace each
 * would raise the other's alarms. Fleets in separate apps cannot be seen here (docs/operations.md).
 */
export function registerFleet(fleet: FleetIdentity): void {
  const root = fleet.construct.node.root;
  const known = fleetsByApp.get(root) ?? [];
  for (const other of known) {
    if (!sameEnvironment(Stack.of(other.construct), Stack.of(fleet.construct))) continue;
    const shared = other.prefix === fleet.prefix ? `prefix "${fleet.prefix}"` : other.metricNamespace === fleet.metricNamespace ? `metric namespace "${fleet.metricNamespace}"` : undefined;
    if (shared) {
      throw new Error(
        `WarmRunners ${fleet.construct.node.path} has the ${shared} of ${other.construct.node.path}, in the same account and region: ` +
          'give each fleet its own `prefix` (the metric namespace follows it unless `metricNamespace` is set) and its own `metricNamespace` if you set one',
      );
    }
  }
  fleetsByApp.set(root, [...known, fleet]);
}

/**
 * Environment-agnostic stacks of one app deploy to the same account and region (the CLI's);
 * a concrete one against an agnostic one may or may not, and is not refused.
 */
function sameEnvironment(a: Stack, b: Stack): boolean {
  const same = (x: string, y: string) => (Token.isUnresolved(x) && Token.isUnresolved(y)) || (!Token.isUnresolved(x) && !Token.isUnresolved(y) && x === y);
  return same(a.account, b.account) && same(a.region, b.region);
}
