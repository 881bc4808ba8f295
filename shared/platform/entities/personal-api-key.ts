import { defineEntity, p } from '@mikro-orm/core';
import { User } from './user.ts';

/** Only `secure_value` (sha256$<hex>) is stored; the plain value is shown once, at creation. */
export const PersonalApiKey = defineEntity({
  name: 'PersonalApiKey',
  tableName: 'personal_api_key',
  properties: {
    id: p.string().length(50).primary(),
    userId: () => p.manyToOne(User).mapToPk().fieldName('user_id').deleteRule('cascade'),
    label: p.string().length(40),
    maskValue: p.string().length(11).nullable(),
    secureValue: p.string().length(300),
    /** null or empty: a legacy key with full access. */
    scopes: p.array().nullable(),
    scopedTeams: p
      .array<number>(
        (v) => Number(v),
        (v) => String(v),
      )
      .columnType('integer[]')
      .nullable(),
    scopedOrganizations: p.array().nullable(),
    createdAt: p
      .datetime()
      .defaultRaw('now()')
      .onCreate(() => new Date()),
    lastUsedAt: p.datetime().nullable(),
    lastRolledAt: p.datetime().nullable(),
  },
  uniques: [{ properties: ['secureValue'] }],
  indexes: [{ name: 'personal_api_key_user_idx', properties: ['userId'] }],
});
