import { REFUSAL_REASONS, type FleetConfig, type Provider } from '../shared/contract';
import type { Refusal } from './verify';

/** The header each provider sends with every delivery, signed or not. */
const EVENT_HEADER: Record<Provider, string> = { github: 'x-github-event', gitlab: 'x-gitlab-event' };

/**
 * The metric a refused request counts in. The Function URL is public, so scanners post to it
 * with no signature and no event header: those count as `WebhookUnsigned`, which no alarm
 * watches. Everything else counts as `WebhookRefused`, which pages: a signature or token that
 * does not verify (a wrong secret refuses every delivery), our secret missing or unusable, and
 * an unsigned request that names the provider's event (a GitHub App or GitLab hook whose
 * secret was left empty sends its deliveries so).
 */
export function refusalMetric(
  metrics: FleetConfig['metrics'],
  provider: Provider,
  refusal: Refusal,
  headers: Readonly<Record<string, string | undefined>>,
): { name: string; dimensions: Record<string, string> } {
  const { names, dimensions } = metrics;
  if (refusal === 'unsigned' && !headers[EVENT_HEADER[provider]]) return { name: names.webhookUnsigned, dimensions: { [dimensions.provider]: provider } };
  return { name: names.webhookRefused, dimensions: { [dimensions.provider]: provider, [dimensions.reason]: REFUSAL_REASONS[refusal] } };
}
