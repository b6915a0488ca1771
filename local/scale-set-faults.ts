import { CloudFormationClient, StackStatus } from '@aws-sdk/client-cloudformation';
import type { CloudFormationCustomResourceEvent } from 'aws-lambda';
import { installationCallerOf, scaleSetApiAt } from '../lambdas/ci/scale-set';
import { createCiProviders } from '../lambdas/ci';
import { createScaleSetResourceHandler, type ScaleSetResourceResponse } from '../lambdas/scale-set-resource/handler';
import { AwsCaller } from '../lambdas/shared/aws-call';
import { providersOnce } from '../lambdas/shared/clients';
import { LAMBDA_ENV, scaleSetEntries, type FleetConfig } from '../lambdas/shared/contract';
import { loadFleetConfig } from '../lambdas/shared/fleet-config-source';
import type { Sink } from '../lambdas/shared/log';
import { Pacer } from '../lambdas/shared/pacing';
import type { LoopbackGitHub } from './ci/github-server';
import { LOCAL_REGION, localClients, localDynamo, type LocalLambdas, type RecordedLeaseHolding } from './lambdas';
import { nextHolding, queueEffects, type InjectedFault, type PlannedScaleSetFault } from './scale-set-run';

/**
 * The impure half of `--scale-set` (local/scale-set-run.ts holds the pure one): the scale-set
 * resource's real handler at provisioning and teardown, and the listener's faults injected
 * into the running sandbox.
 */

/** Another container's poller, as the foreign-lease fault writes it. */
export const FOREIGN_HOLDER = 'another-container';
/** Another container's poller that takes a held lease over (its own id: the foreign-lease fault's may be live beside it). */
export const TAKEOVER_HOLDER = 'another-container-takeover';

/**
 * The scale-set resource's onEvent as lambdas/scale-set-resource/index.ts builds it (its SSM on
 * moto, the scale-set client through the fleet's GitHub App at the loopback), sent the Create a
 * deploy sends and the Delete of `cdk destroy`. moto keeps no stack being deleted, so the one
 * DescribeStacks the Delete makes is answered as CloudFormation answers during a stack
 * deletion (DELETE_IN_PROGRESS): the scale sets go.
 */
export function localScaleSetResource(endpoint: string, fleetConfigParameter: string, jobRecordTable: string, sink: Sink) {
  const clients = localClients(endpoint);
  const cloudformation = new CloudFormationClient({ endpoint, region: LOCAL_REGION, credentials: { accessKeyId: 'local', secretAccessKey: 'local' }, maxAttempts: 1 });
  cloudformation.middlewareStack.add(
    (next, context) => async (args) => {
      if (context.commandName !== 'DescribeStacksCommand') return next(args);
      return { output: { Stacks: [{ StackName: 'local', StackStatus: StackStatus.DELETE_IN_PROGRESS, CreationTime: new Date() }], $metadata: {} }, response: {} } as never;
    },
    { step: 'initialize', name: 'local-stack-being-deleted' },
  );
  const providers = providersOnce((config: FleetConfig) => createCiProviders(config, { ssm: clients.ssm, metricSink: sink }));
  const handler = createScaleSetResourceHandler({
    cloudformation,
    aws: new AwsCaller({ pacer: new Pacer() }),
    ssm: clients.ssm,
    // The sessions and lease items of a deleted scale set go with it (the job-record table on moto).
    dynamodb: localDynamo(endpoint),
    tableName: jobRecordTable,
    loadConfig: () => loadFleetConfig(clients.ssm, { [LAMBDA_ENV.fleetConfigParameter]: fleetConfigParameter }),
    scaleSetApiFor: (config, scope) => scaleSetApiAt(config, scope, { github: installationCallerOf(providers(config).github) }),
    sink,
  });
  const event = (config: FleetConfig, type: 'Create' | 'Delete') =>
    ({
      RequestType: type,
      ServiceToken: 'local',
      ResponseURL: 'http://localhost/',
      StackId: 'arn:aws:cloudformation:us-east-1:123456789012:stack/local/1',
      RequestId: type,
      LogicalResourceId: 'ScaleSets',
      ResourceType: 'Custom::RunnerScaleSets',
      // As lib/scale-set-resource.ts renders it.
      ResourceProperties: { ServiceToken: 'local', ScaleSets: JSON.stringify(scaleSetEntries(config)) },
      ...(type === 'Delete' ? { PhysicalResourceId: 'scale-sets' } : {}),
    }) as CloudFormationCustomResourceEvent;
  return {
    create: (config: FleetConfig): Promise<ScaleSetResourceResponse> => handler(event(config, 'Create')),
    delete: (config: FleetConfig): Promise<ScaleSetResourceResponse> => handler(event(config, 'Delete')),
  };
}

export interface FaultTarget {
  readonly github: LoopbackGitHub;
  readonly lambdas: LocalLambdas;
  readonly pool: string;
  readonly scaleSetId: number;
  readonly startedAt: number;
  /** How long the foreign holder keeps the lease (ms). */
  readonly foreignLeaseMs: number;
  /** How long a listener invocation holds the lease before it hands it over (ms: its timeout less its margin). */
  readonly handOverMs: number;
  readonly until: () => boolean;
  /**
   * The loopback holds one lost acknowledgement at a time: a fault on it waits until the one
   * before it was spent (an acknowledgement went through after it), so each effect is its own.
   */
  readonly acks: { spent: Promise<void> };
}

/** A fault injected, with how its effect is read at the end. */
export interface Injection {
  readonly planned: PlannedScaleSetFault;
  at?: number;
  /** queue-token-expired: the request log's length at each expiry of the token (401s from each on are injected, until a refresh). */
  tokenExpiredAt?: number[];
  observe?: () => string | undefined;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** How often queue-token-expired expires the token for a holder that then hands over without meeting it. */
const TOKEN_EXPIRY_ATTEMPTS = 8;
/** How many hand-overs queue-token-expired waits for a holder early in its window before it takes any holder polling. */
const TOKEN_EXPIRY_PATIENCE_HAND_OVERS = 3;

/** Waits for `ready` (every 100 ms) until the target's run ends; false when it ended first. */
async function until(t: FaultTarget, ready: () => boolean): Promise<boolean> {
  while (!ready()) {
    if (t.until()) return false;
    await sleep(100);
  }
  return true;
}

/** Injects one planned fault; resolves when it was injected (or the run ended first). */
export async function inject(t: FaultTarget, f: PlannedScaleSetFault, delayMs: number): Promise<Injection> {
  const injection: Injection = { planned: f };
  await sleep(delayMs);
  const hooks = t.github.scaleSets;
  const session = () => hooks.list().find((s) => s.id === t.scaleSetId)?.session;
  const leases = t.lambdas.leases!;
  const listenerHolds = () => {
    const h = leases.holderOf(t.pool);
    return h !== undefined && h !== FOREIGN_HOLDER && h !== TAKEOVER_HOLDER ? h : undefined;
  };
  const stamp = () => {
    injection.at = Math.round((Date.now() - t.startedAt) / 100) / 10;
  };
  /** Takes the acknowledgement slot: resolves once the previous ack fault was spent; `armed` marks this one's arming. */
  const ackSlot = async (): Promise<(armedAt: number) => void> => {
    const before = t.acks.spent;
    let release!: () => void;
    t.acks.spent = new Promise((r) => (release = r));
    await before;
    return (armedAt) => {
      // Spent once an acknowledgement after it went through: the client's second attempt of the
      // one it hit, or the next message's (a lost one is asked again at once, and must not meet the next fault).
      void until(t, () => t.github.requests().slice(armedAt).some((r) => r.method === 'DELETE' && /\/messages\/\d+$/.test(r.path) && r.status !== undefined && r.status < 300)).then(() => release());
    };
  };
  /** Retries a hook that needs a session until one is open when it is called. */
  const withSession = async (act: () => void): Promise<boolean> => {
    for (;;) {
      if (!(await until(t, () => session() !== undefined))) return false;
      try {
        act();
        return true;
      } catch {
        await sleep(100);
      }
    }
  };
  /** The next holding of the lease after `mine` by another holder: recovery after a fault on the lease. */
  const nextAfter = (mine: RecordedLeaseHolding) => nextHolding(leases.holdings.filter((x) => x.pool === t.pool), mine);
  switch (f.fault) {
    case 'poller-killed': {
      let killed: string | undefined;
      // Mid-poll: the holder has a GetMessage in flight (the loopback's polls of the scale set).
      await until(t, () => {
        const h = listenerHolds();
        if (h === undefined || session() === undefined || hooks.polls(t.scaleSetId) === 0) return false;
        if (t.lambdas.killListener(h)) killed = h;
        return killed !== undefined;
      });
      if (!killed) return injection;
      stamp();
      injection.observe = () => {
        const mine = leases.holdings.findLast((x) => x.holder === killed)!;
        const next = nextAfter(mine);
        // No poller took the lease again: recovery not shown.
        return next ? `${killed} stopped dead mid-poll holding the lease (no release); ${next.holder} took it ${((next.acquiredAt - mine.expiresAt) / 1000).toFixed(1)} s after its expiry` : undefined;
      };
      return injection;
    }
    case 'second-poller': {
      if (!(await until(t, () => listenerHolds() !== undefined))) return injection;
      const holder = listenerHolds();
      const extra = t.lambdas.invokeListener()!;
      stamp();
      injection.observe = () => {
        const took = leases.holdings.find((h) => h.holder === extra.id);
        const ended = extra.outcome ? `ended ${Object.entries(extra.outcome).map(([p, o]) => `${p} ${o}`).join(', ')}` : extra.killed ? 'was killed later' : undefined;
        if (!took && !ended) return undefined;
        return `${extra.id} started while ${holder} held the lease${took ? `, took it ${((took.acquiredAt - extra.startedAt) / 1000).toFixed(1)} s later (at the hand-over)` : ''}${ended ? `, ${ended}` : ''}`;
      };
      return injection;
    }
    case 'foreign-lease': {
      let taken = false;
      // Taken as any poller takes it (free or expired), then never renewed or released.
      while (!t.until()) {
        const until = new Date(Date.now() + t.foreignLeaseMs);
        const out = await leases.acquire(t.pool, FOREIGN_HOLDER, { expiresAt: until, releaseAt: until }, new Date());
        if (out.kind === 'acquired') {
          taken = true;
          break;
        }
        await sleep(200);
      }
      if (!taken) return injection;
      stamp();
      injection.observe = () => {
        const mine = leases.holdings.findLast((x) => x.holder === FOREIGN_HOLDER)!;
        const next = nextAfter(mine);
        return next ? `another holder took the free lease for ${(t.foreignLeaseMs / 1000).toFixed(0)} s; ${next.holder} took it ${((next.acquiredAt - mine.expiresAt) / 1000).toFixed(1)} s after its expiry` : undefined;
      };
      return injection;
    }
    case 'lease-taken-over': {
      // A HELD lease taken over as production can see it happen: another container's poller, its
      // clock ahead of the holder's by more than the lease's remaining term, finds it expired and
      // takes it through the listener's own acquire (poll.ts takeLease), then is gone (a short
      // expiry: the next poller waits for it, a lease is a lease). Taken while the holder has half
      // its polling time left, so a renewal of its own comes after and finds the lease lost (its
      // last poll's window ending instead would leave it only the release to find it).
      let displaced: string | undefined;
      let sentAt = 0;
      let takenAt = 0;
      let expiresAt = 0;
      while (!t.until() && displaced === undefined) {
        const h = listenerHolds();
        const inv = h === undefined ? undefined : t.lambdas.listenerInvocations.find((i) => i.id === h);
        const held = h === undefined ? undefined : leases.holdings.findLast((x) => x.pool === t.pool && x.holder === h && x.releasedAt === undefined);
        if (!inv || !held || session() === undefined || inv.startedAt + t.handOverMs - Date.now() < t.handOverMs / 2) {
          await sleep(100);
          continue;
        }
        sentAt = Date.now();
        const until = new Date(sentAt + t.foreignLeaseMs);
        // Never between the holder's renewal and the demand it covers (`outsideDemands`); its
        // clock read at the take, after any renewal that moved the expiry.
        const out = await t.lambdas.outsideDemands(h!, async () => {
          const taken = await leases.acquire(t.pool, TAKEOVER_HOLDER, { expiresAt: until, releaseAt: until }, new Date(held.expiresAt + 1_000));
          takenAt = Date.now();
          return taken;
        });
        if (out.kind !== 'acquired') {
          await sleep(100);
          continue;
        }
        if (held.releasedAt !== undefined || inv.outcome !== undefined) {
          // The holder gave the lease back meanwhile: a free lease was taken, nobody displaced. Given back, tried again.
          await leases.release(out.lease, {});
          continue;
        }
        expiresAt = out.lease.expiresAt;
        displaced = h;
        // The item no longer names the displaced holder: its holding ends where the other one begins.
        held.releasedAt = takenAt;
      }
      if (!displaced) return injection;
      stamp();
      injection.observe = () => {
        const inv = t.lambdas.listenerInvocations.find((i) => i.id === displaced);
        if (inv?.outcome?.[t.pool] !== 'lease-lost') return undefined;
        // Its first write on the lease after the take-over (a renewal before each poll, or a record) found it lost; no queue call may come after it.
        const lost = inv.leaseWrites.find((r) => r.at >= sentAt && r.outcome === 'lost');
        if (!lost || inv.queueCalls.some((at) => at > lost.at)) return undefined;
        const next = leases.holdings.find((x) => x.pool === t.pool && x.acquiredAt > takenAt && x.holder !== TAKEOVER_HOLDER && x.holder !== FOREIGN_HOLDER);
        return `another holder (its clock ahead) took the held lease; ${displaced} ended lease-lost with no queue call after its renewal${next ? `; ${next.holder} took it ${((next.acquiredAt - expiresAt * 1000) / 1000).toFixed(1)} s after its expiry` : ''}`;
      };
      return injection;
    }
    case 'message-redelivered': {
      const armed = await ackSlot();
      const deliveredBefore = hooks.delivered().length;
      const from = t.github.requests().length;
      // Both of the client's attempts lost before they applied (it asks once more after a lost answer).
      const ok = await withSession(() => hooks.dropNextAck(t.scaleSetId, 'before', 2));
      armed(from);
      if (!ok) return injection;
      stamp();
      injection.observe = () => queueEffects.redelivered(t.github.requests().slice(from), hooks.delivered().slice(deliveredBefore), t.scaleSetId);
      return injection;
    }
    case 'ack-lost-after-applied': {
      const armed = await ackSlot();
      const deliveredBefore = hooks.delivered().length;
      const from = t.github.requests().length;
      const ok = await withSession(() => hooks.dropNextAck(t.scaleSetId, 'after'));
      armed(from);
      if (!ok) return injection;
      stamp();
      injection.observe = () => queueEffects.ackResent(t.github.requests().slice(from), hooks.delivered().slice(deliveredBefore), t.scaleSetId);
      return injection;
    }
    case 'session-expired': {
      let expired: string | undefined;
      if (!(await withSession(() => {
        expired = session()?.id;
        hooks.expireSession(t.scaleSetId);
      }))) return injection;
      stamp();
      injection.observe = () => {
        const log = hooks.sessions();
        const at = log.findIndex((s) => s.sessionId === expired);
        const next = at >= 0 ? log[at + 1] : undefined;
        return next ? `session expired at GitHub; ${next.owner} opened a new one` : undefined;
      };
      return injection;
    }
    case 'queue-token-expired': {
      // A holder early in its invocation with a poll in flight: its next poll meets the expired token (not a hand-over's refresh).
      // A holder whose poll brought a message may spend the rest of its window on the demand and
      // hand over without polling again: the next holder's refresh gets a new token and nobody met
      // the expired one. The token is then expired again on a later holding (a few times at most).
      let expired: string | undefined;
      let from = -1;
      const expiries: number[] = [];
      let injectedAt = Number.POSITIVE_INFINITY;
      const waitingSince = Date.now();
      const met = () => expired !== undefined && t.github.requests().slice(from).some((r) => r.status === 401 && r.path.includes(`/sessions/${expired}/messages`));
      for (let attempt = 0; attempt < TOKEN_EXPIRY_ATTEMPTS && !met(); attempt++) {
        let holder: string | undefined;
        const injected = await until(t, () => {
          const h = listenerHolds();
          const inv = h === undefined ? undefined : t.lambdas.listenerInvocations.find((i) => i.id === h);
          const id = session()?.id;
          // It stops polling handOverMs after its start: with half of that left, it polls again after the one in flight.
          // On a loaded machine a holder's first poll may start only in the second half of its
          // window, holding after holding (the CI run of 2026-12-07 never injected it in 87
          // holdings): after a few hand-overs' wait any holder with a poll in flight will do, and
          // the attempts above expire the token again when it hands over without meeting it.
          const early = inv !== undefined && inv.startedAt + t.handOverMs - Date.now() >= t.handOverMs / 2;
          if (!inv || id === undefined || (!early && Date.now() - waitingSince < TOKEN_EXPIRY_PATIENCE_HAND_OVERS * t.handOverMs) || hooks.polls(t.scaleSetId) === 0) return false;
          if (from < 0) {
            from = t.github.requests().length;
            injectedAt = Date.now();
          }
          expiries.push(t.github.requests().length);
          hooks.expireQueueToken(t.scaleSetId);
          expired = id;
          holder = h;
          return true;
        });
        if (!injected) break;
        if (attempt === 0) stamp();
        await until(t, () => met() || listenerHolds() !== holder);
      }
      if (expired === undefined) return injection;
      injection.tokenExpiredAt = expiries;
      // The refresh must be the refused invocation's own (a next holder's routine refresh at the
      // hand-over would cure the token as well, and hide a listener that stopped on the 401).
      const cured = () => t.lambdas.listenerInvocations.some((inv) => inv.tokenRefusals.some((at) => at >= injectedAt && inv.refreshes.some((r) => r > at)));
      injection.observe = () => {
        const seen = queueEffects.tokenExpired(t.github.requests().slice(from), expired!);
        return seen && cured() ? `${seen} by the invocation the queue refused (the token expired ${expiries.length} time(s))` : undefined;
      };
      return injection;
    }
  }
}

/** The injections as the proof reads them. */
export function injectedFaults(injections: readonly Injection[]): InjectedFault[] {
  return injections.map((i) => {
    const effect = i.observe?.();
    return { fault: i.planned.fault, moment: i.planned.moment, ...(i.at === undefined ? {} : { at: i.at }), ...(effect === undefined ? {} : { effect }) };
  });
}
