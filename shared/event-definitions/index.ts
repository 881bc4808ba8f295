// The public face of shared/event-definitions/: the only file other folders import.
export { definitionsFresh, rememberEventDefinitions, upsertEventDefinitions, type DefinitionKey } from './seen.ts';
export { EventDefinitionInputError, changeDefinition, removeDefinition } from './service.ts';
export { countReads, findDefinition, listDefinitions, readsInLast30Days, type DefinitionRow } from './store.ts';
