// A tracking plan as code: the document (validated with ajv against PLAN_DOCUMENT_SCHEMA), compiled once
// per version (each event's JSON Schema 2020-12 with ajv's 2020 build, allErrors), and what it decides
// for each captured event: its drop rules first, then the mode of the event's entry (or default_mode).
import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv';
import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';
import type { IngestEvent } from '../persons/index.ts';
import type { IngestionWarningInput, IngestionWarningType } from '../ingestion/index.ts';

// ajv-formats is CommonJS: its default import is module.exports, which carries the plugin as `default` too.
const addFormats = addFormatsModule.default;

export const PLAN_MODES = ['allow', 'stamp', 'omit', 'quarantine', 'drop'] as const;
export type PlanMode = (typeof PLAN_MODES)[number];

/** Events a plan may name, drop rules it may hold, violations kept per event. */
export const MAX_PLAN_EVENTS = 2000;
export const MAX_DROP_RULES = 500;
const MAX_VIOLATIONS_PER_EVENT = 20;

const mode = { enum: PLAN_MODES } as const;
const name = { type: 'string', minLength: 1, maxLength: 400 } as const;

/** The document PUT …/tracking_plan/ takes (and the CLI's file holds). */
export const PLAN_DOCUMENT_SCHEMA = {
  type: 'object',
  additionalProperties: false,
  properties: {
    default_mode: {
      ...mode,
      description:
        "What happens to an event the plan does not name (allow: stored as sent). Events whose name starts with $ (PostHog's own) are governed only when named.",
    },
    events: {
      type: 'object',
      maxProperties: MAX_PLAN_EVENTS,
      propertyNames: name,
      description: 'Per event name: its mode (default allow) and a JSON Schema (2020-12) its properties must match',
      additionalProperties: {
        type: 'object',
        additionalProperties: false,
        properties: {
          mode,
          schema: {
            type: 'object',
            additionalProperties: true,
            description: "JSON Schema (2020-12) of the event's properties",
          },
          description: { type: 'string', maxLength: 10_000 },
        },
      },
    },
    drop_rules: {
      type: 'array',
      maxItems: MAX_DROP_RULES,
      description:
        'Events dropped before the plan is checked: a rule drops an event matching all it names (event name, distinct id, a property present or equal to a value)',
      items: {
        type: 'object',
        additionalProperties: false,
        minProperties: 1,
        properties: {
          event: name,
          distinct_id: name,
          property: {
            type: 'object',
            additionalProperties: false,
            required: ['key'],
            properties: {
              key: name,
              value: { description: 'Equal to this (any JSON); left out: the property is present' },
            },
          },
          description: { type: 'string', maxLength: 10_000 },
        },
      },
    },
  },
} as const;

export interface DropRule {
  event?: string;
  distinct_id?: string;
  property?: { key: string; value?: unknown };
  description?: string;
}

export interface PlanDocument {
  default_mode?: PlanMode;
  events?: Record<string, { mode?: PlanMode; schema?: Record<string, unknown>; description?: string }>;
  drop_rules?: DropRule[];
}

/** One way an event departs from the plan: the ajv keyword (or unplanned_event), the property, a message. */
export interface Violation {
  kind: string;
  property: string | null;
  message: string;
}

interface PlannedEvent {
  mode: PlanMode;
  validate: ValidateFunction | null;
}

/** A version of a project's plan, ready to check events. */
export interface CompiledPlan {
  version: number;
  document: PlanDocument;
  defaultMode: PlanMode;
  events: Map<string, PlannedEvent>;
  dropRules: DropRule[];
}

/** A document or one of its schemas refused; `attr` names where (events.<name>.schema). */
export class PlanInputError extends Error {
  readonly attr: string | null;
  constructor(message: string, attr: string | null = null) {
    super(message);
    this.attr = attr;
  }
}

const documentValidator = new Ajv({ allErrors: false, strict: false }).compile(PLAN_DOCUMENT_SCHEMA);

/** Checks a document's shape (PLAN_DOCUMENT_SCHEMA); throws PlanInputError. */
export function checkPlanDocument(document: unknown): PlanDocument {
  if (!documentValidator(document)) {
    const error = documentValidator.errors![0];
    const where = error.instancePath.replace(/^\//, '').replaceAll('/', '.');
    throw new PlanInputError(`${where || 'plan'} ${error.message ?? 'is invalid'}`, where || null);
  }
  return document as PlanDocument;
}

/** Compiles a version's document: every event schema once, with one ajv 2020 instance of its own. */
export function compilePlan(document: unknown, version: number): CompiledPlan {
  const doc = checkPlanDocument(document);
  const ajv = new Ajv2020({ allErrors: true, strict: false, validateFormats: true });
  addFormats(ajv);
  const events = new Map<string, PlannedEvent>();
  for (const [event, entry] of Object.entries(doc.events ?? {})) {
    let validate: ValidateFunction | null = null;
    if (entry.schema !== undefined) {
      try {
        validate = ajv.compile(entry.schema);
      } catch (error) {
        throw new PlanInputError(
          `The schema of event "${event}" is not a valid JSON Schema: ${(error as Error).message}`,
          `events.${event}.schema`,
        );
      }
    }
    events.set(event, { mode: entry.mode ?? 'allow', validate });
  }
  return { version, document: doc, defaultMode: doc.default_mode ?? 'allow', events, dropRules: doc.drop_rules ?? [] };
}

/** The first segment of a JSON pointer, unescaped: the top-level property an error is about. */
function topProperty(pointer: string): string {
  const segment = pointer.split('/')[1] ?? '';
  return segment.replaceAll('~1', '/').replaceAll('~0', '~');
}

function violationOf(error: ErrorObject): Violation {
  const params = error.params as Record<string, unknown>;
  let property: string | null = null;
  if (error.instancePath !== '') property = topProperty(error.instancePath);
  else if (typeof params.missingProperty === 'string') property = params.missingProperty;
  else if (typeof params.additionalProperty === 'string') property = params.additionalProperty;
  else if (typeof params.unevaluatedProperty === 'string') property = params.unevaluatedProperty;
  else if (typeof params.propertyName === 'string') property = params.propertyName;
  const at = error.instancePath === '' ? 'properties' : `properties${error.instancePath.replaceAll('/', '.')}`;
  return { kind: error.keyword, property, message: `${at} ${error.message ?? 'is invalid'}` };
}

const UNPLANNED: Violation = {
  kind: 'unplanned_event',
  property: null,
  message: 'the event is not in the tracking plan',
};

/** The violations of one event (none: it follows the plan) and the mode that applies. */
export function checkEvent(plan: CompiledPlan, event: string, properties: Record<string, unknown>) {
  const planned = plan.events.get(event);
  if (planned === undefined) {
    // PostHog's own events ($pageview, $identify, $snapshot…) follow default_mode only when named.
    if (plan.defaultMode === 'allow' || event.startsWith('$')) return { mode: 'allow' as PlanMode, violations: [] };
    return { mode: plan.defaultMode, violations: [UNPLANNED] };
  }
  if (planned.validate === null || planned.validate(properties)) return { mode: planned.mode, violations: [] };
  const violations = planned.validate.errors!.slice(0, MAX_VIOLATIONS_PER_EVENT).map(violationOf);
  return { mode: planned.mode, violations };
}

const sameJson = (a: unknown, b: unknown) =>
  a === b || (typeof a === 'object' && a !== null && JSON.stringify(a) === JSON.stringify(b));

/** The index of the first drop rule `event` matches, or -1. */
export function matchingDropRule(plan: CompiledPlan, event: IngestEvent): number {
  return plan.dropRules.findIndex(
    (rule) =>
      (rule.event === undefined || rule.event === event.event) &&
      (rule.distinct_id === undefined || rule.distinct_id === event.distinctId) &&
      (rule.property === undefined ||
        (Object.hasOwn(event.properties, rule.property.key) &&
          (!('value' in rule.property) || sameJson(event.properties[rule.property.key], rule.property.value)))),
  );
}

export interface HeldEvent {
  event: IngestEvent;
  violations: Violation[];
}

/** What a plan did to a batch of events. */
export interface Enforcement {
  /** Events to store (as sent, stamped, or without omitted properties), in their order. */
  kept: IngestEvent[];
  quarantined: HeldEvent[];
  dropped: HeldEvent[];
  /** One per event not stored as sent. */
  warnings: IngestionWarningInput[];
  /** Violations per event name and kind. */
  counts: Map<string, { event: string; kind: string; count: number }>;
  /** Events per outcome (allow, stamp, omit, quarantine, drop, drop_rule) that had violations or matched a rule. */
  outcomes: Map<string, number>;
}

/** Applies `plan` to `events` (which it does not change: a stamped or omitted event is a copy). */
export function enforcePlan(plan: CompiledPlan, events: IngestEvent[]): Enforcement {
  const done: Enforcement = {
    kept: [],
    quarantined: [],
    dropped: [],
    warnings: [],
    counts: new Map(),
    outcomes: new Map(),
  };
  const warn = (e: IngestEvent, type: IngestionWarningType, details: Record<string, unknown>) =>
    done.warnings.push({
      type,
      eventUuid: e.uuid,
      distinctId: e.distinctId,
      details: { eventName: e.event, planVersion: plan.version, ...details },
    });
  const outcome = (name: string) => done.outcomes.set(name, (done.outcomes.get(name) ?? 0) + 1);
  for (const e of events) {
    if (plan.dropRules.length > 0) {
      const rule = matchingDropRule(plan, e);
      if (rule >= 0) {
        done.dropped.push({ event: e, violations: [] });
        outcome('drop_rule');
        warn(e, 'event_dropped_by_rule', { rule, reason: `drop rule ${rule} of the tracking plan matched` });
        continue;
      }
    }
    const { mode, violations } = checkEvent(plan, e.event, e.properties);
    if (violations.length === 0) {
      done.kept.push(e);
      continue;
    }
    for (const v of violations) {
      const key = `${e.event}\u0000${v.kind}`;
      const counted = done.counts.get(key);
      if (counted) counted.count++;
      else done.counts.set(key, { event: e.event, kind: v.kind, count: 1 });
    }
    outcome(mode);
    switch (mode) {
      case 'allow':
        done.kept.push(e);
        break;
      case 'stamp':
        done.kept.push({ ...e, properties: { ...e.properties, $plan_violations: violations } });
        warn(e, 'event_plan_violations_stamped', { violations, reason: 'stored with $plan_violations' });
        break;
      case 'omit': {
        const properties = { ...e.properties };
        const omitted: string[] = [];
        for (const v of violations)
          if (v.property !== null && Object.hasOwn(properties, v.property)) {
            delete properties[v.property];
            omitted.push(v.property);
          }
        done.kept.push(omitted.length > 0 ? { ...e, properties } : e);
        if (omitted.length > 0)
          warn(e, 'event_plan_properties_omitted', {
            omitted: [...new Set(omitted)],
            violations,
            reason: 'stored without the properties that violated the plan',
          });
        break;
      }
      case 'quarantine':
        done.quarantined.push({ event: e, violations });
        warn(e, 'event_quarantined_by_plan', {
          violations,
          reason:
            'held in quarantine: list it at …/tracking_plan/quarantine/, replay it once the plan or sender is fixed',
        });
        break;
      case 'drop':
        done.dropped.push({ event: e, violations });
        warn(e, 'event_dropped_by_plan', { violations, reason: "the plan's mode for this event is drop" });
        break;
    }
  }
  return done;
}
