// Seeding data through the real capture endpoint, as SDKs would.
import { expect } from 'vitest';

export interface SeedEvent {
  event: string;
  distinct_id: string;
  properties?: Record<string, unknown>;
  timestamp?: string;
}

export async function capture(baseUrl: string, projectToken: string, events: SeedEvent[]): Promise<void> {
  const res = await fetch(`${baseUrl}/batch/`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ api_key: projectToken, batch: events.map((e) => ({ properties: {}, ...e })) }),
  });
  expect(res.status, await res.clone().text()).toBe(200);
}

/** A checkout experiment's two metrics: revenue (sum of `amount` on purchase) and the cart → purchase funnel. */
export const CHECKOUT_METRICS = [
  {
    kind: 'ExperimentMetric',
    metric_type: 'mean',
    source: { kind: 'EventsNode', event: 'purchase', math: 'sum', math_property: 'amount' },
  },
  {
    kind: 'ExperimentMetric',
    metric_type: 'funnel',
    series: [
      { kind: 'EventsNode', event: 'cart' },
      { kind: 'EventsNode', event: 'purchase' },
    ],
  },
];
