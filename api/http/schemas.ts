// Building blocks of response schemas. Response objects that list their properties are closed by the
// response check and the OpenAPI document (see closedResponseSchema); free-form values say so here.

/** Any JSON value: the seed's "free-form" fields (stored as given). */
export const anyJson = (description = 'Any JSON value, stored as given.') => ({ description });

/** An object whose members are free-form (person properties, flag filters, metadata). */
export const openObject = (description?: string) => ({
  type: 'object',
  additionalProperties: true,
  ...(description ? { description } : {}),
});
export const nullableOpenObject = (description?: string) => ({ ...openObject(description), type: ['object', 'null'] });

export const dateTime = { type: 'string', format: 'date-time' } as const;
export const nullableDateTime = { type: ['string', 'null'], format: 'date-time' } as const;
export const nullableString = { type: ['string', 'null'] } as const;
export const nullableInteger = { type: ['integer', 'null'] } as const;
export const stringArray = { type: 'array', items: { type: 'string' } } as const;

/** An object whose every listed property is always present (what a serializer writes out). */
export function record(properties: Record<string, unknown>, options: { optional?: string[]; nullable?: boolean } = {}) {
  const optional = new Set(options.optional ?? []);
  return {
    type: options.nullable ? ['object', 'null'] : 'object',
    required: Object.keys(properties).filter((name) => !optional.has(name)),
    properties,
  };
}

/**
 * Path parameters `id` of objects with integer primary keys, typed for the OpenAPI document so a generated
 * client takes the `id` of a response as it is. A malformed id is answered as an unknown one (404).
 */
export const integerIdParam = (what: string) => ({ id: { type: 'integer', description: `The ${what}'s id` } });
