// Our evaluation against the SDK's own local-evaluation functions (the oracle): the same person
// must land in the same bucket and variant here and in posthog-node.
import { getFeatureFlagHash, getFeatureFlagVariant, getHoldoutVariant } from '@posthog/core';
import { describe, expect, it } from 'vitest';
import {
  evaluateFlag,
  flagHash,
  propertyMatches,
  variantFor,
  type FlagDefinition,
} from '../../../shared/flags/evaluate.ts';

const variants = [
  { key: 'control', rollout_percentage: 50 },
  { key: 'test', rollout_percentage: 30 },
  { key: 'test-2', rollout_percentage: 20 },
];

describe('hashing agrees with posthog-node', () => {
  it('bucket, variant and holdout for 500 distinct ids', async () => {
    for (let i = 0; i < 500; i++) {
      const id = `user-${i}-${(i * 7919) % 1013}`;
      expect(flagHash('my-flag', id)).toBe(await getFeatureFlagHash('my-flag', id));
      expect(variantFor('my-flag', id, variants)).toBe(await getFeatureFlagVariant('my-flag', id, variants));
      const holdout = { id: 7, exclusion_percentage: 25 };
      const expected = await getHoldoutVariant(holdout, id);
      const ours = evaluateFlag(
        {
          id: 1,
          key: 'my-flag',
          version: 1,
          active: true,
          deleted: false,
          filters: { holdout, groups: [{ rollout_percentage: 100 }] },
        },
        id,
        {},
      );
      expect(ours.variant === 'holdout-7' ? 'holdout-7' : undefined).toBe(expected);
    }
  });

  it('splits a 50/50 rollout within statistical bounds', () => {
    let control = 0;
    const n = 10_000;
    for (let i = 0; i < n; i++)
      if (
        variantFor('exp', `d${i}`, [
          { key: 'control', rollout_percentage: 50 },
          { key: 'test', rollout_percentage: 50 },
        ]) === 'control'
      )
        control++;
    expect(Math.abs(control / n - 0.5)).toBeLessThan(0.02); // ~4 standard deviations
  });
});

describe('evaluateFlag', () => {
  const flag = (filters: FlagDefinition['filters'], extra: Partial<FlagDefinition> = {}): FlagDefinition => ({
    id: 1,
    key: 'f',
    version: 1,
    active: true,
    deleted: false,
    filters,
    ...extra,
  });

  it('is off when inactive or deleted', () => {
    expect(evaluateFlag(flag({ groups: [{ rollout_percentage: 100 }] }, { active: false }), 'a', {}).enabled).toBe(
      false,
    );
    expect(evaluateFlag(flag({ groups: [{ rollout_percentage: 100 }] }, { deleted: true }), 'a', {}).reason.code).toBe(
      'disabled',
    );
  });

  it('matches release conditions on person properties, in order', () => {
    const f = flag({
      groups: [
        {
          properties: [{ key: 'email', value: '@corp.com', operator: 'icontains', type: 'person' }],
          rollout_percentage: 100,
          variant: 'test',
        },
        { rollout_percentage: 0 },
      ],
      multivariate: {
        variants: [
          { key: 'control', rollout_percentage: 50 },
          { key: 'test', rollout_percentage: 50 },
        ],
      },
    });
    const corp = evaluateFlag(f, 'x', { email: 'A@Corp.com' });
    expect(corp).toMatchObject({
      enabled: true,
      variant: 'test',
      reason: { code: 'condition_match', condition_index: 0 },
    });
    const other = evaluateFlag(f, 'x', { email: 'a@else.com' });
    expect(other).toMatchObject({ enabled: false, reason: { code: 'out_of_rollout_bound', condition_index: 1 } });
    expect(
      evaluateFlag(flag({ groups: [{ properties: [{ key: 'plan', value: ['pro'], type: 'person' }] }] }), 'x', {}),
    ).toMatchObject({
      enabled: false,
      reason: { code: 'no_condition_match' },
    });
  });

  it('returns the payload of the chosen value', () => {
    const f = flag({ groups: [{ rollout_percentage: 100 }], payloads: { true: '{"a":1}' } });
    expect(evaluateFlag(f, 'x', {}).payload).toBe('{"a":1}');
  });
});

describe('propertyMatches operators', () => {
  const props = { email: 'ada@example.com', age: 36, signed_up: '2024-01-10T00:00:00Z', plan: null };
  it.each([
    [{ key: 'email', value: 'ADA@example.com' }, true],
    [{ key: 'email', value: ['x', 'ada@example.com'], operator: 'exact' }, true],
    [{ key: 'email', value: 'ada@example.com', operator: 'is_not' }, false],
    [{ key: 'email', value: 'EXAMPLE', operator: 'icontains' }, true],
    [{ key: 'email', value: 'zzz', operator: 'not_icontains' }, true],
    [{ key: 'email', value: '^ada@', operator: 'regex' }, true],
    [{ key: 'email', value: '[', operator: 'regex' }, false],
    [{ key: 'email', value: '^bob', operator: 'not_regex' }, true],
    [{ key: 'age', value: '30', operator: 'gt' }, true],
    [{ key: 'age', value: 36, operator: 'lte' }, true],
    [{ key: 'age', value: 36, operator: 'lt' }, false],
    [{ key: 'plan', operator: 'is_set' }, true],
    [{ key: 'missing', operator: 'is_not_set' }, true],
    [{ key: 'missing', value: 'x' }, false],
    [{ key: 'signed_up', value: '2024-02-01', operator: 'is_date_before' }, true],
    [{ key: 'signed_up', value: '2024-02-01', operator: 'is_date_after' }, false],
  ])('%j → %s', (filter, expected) => {
    expect(propertyMatches(filter, props)).toBe(expected);
  });
});
