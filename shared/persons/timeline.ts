// A person's properties over time, rebuilt from its own $set / $set_once / $unset history: what the
// properties_timeline endpoint answers and an access export hands over.
import { isoTimestamp } from '../platform/time.ts';
import { personUpdateOf } from './person-updates.ts';
import { applyPropertyUpdate } from './property-rules.ts';

export interface TimelinePoint {
  timestamp: string | null;
  properties: Record<string, unknown>;
  relevant_event_count: number;
}

/**
 * The points of the timeline of `events` (oldest first): a point wherever the properties (only the
 * `crucial` keys, when given) change at or after `from`, counting the events that kept them.
 */
export function propertiesTimeline(
  events: readonly { event: string; properties: Record<string, unknown>; timestamp: Date | string }[],
  from: Date,
  crucial: readonly string[] = [],
): TimelinePoint[] {
  let state: Record<string, unknown> = {};
  const points: TimelinePoint[] = [];
  const fingerprint = (props: Record<string, unknown>) =>
    JSON.stringify(crucial.length ? crucial.map((k) => props[k]) : props);
  for (const event of events) {
    state = applyPropertyUpdate(state, personUpdateOf(event.event, event.properties)).properties;
    if (new Date(event.timestamp) < from) continue;
    const last = points.at(-1);
    if (last && fingerprint(last.properties) === fingerprint(state)) last.relevant_event_count++;
    else points.push({ timestamp: isoTimestamp(event.timestamp), properties: { ...state }, relevant_event_count: 1 });
  }
  return points;
}
