// Constraint names as PostgreSQL itself chooses them for the migrations' inline `primary key`, `unique`
// and `references` clauses (`<table>_<columns>_pkey|key|fkey`, shortened to 63 bytes the way PostgreSQL's
// makeObjectName does), so the entities need not name every constraint for the schema comparison to match.
import { UnderscoreNamingStrategy } from '@mikro-orm/core';

const SUFFIX = { primary: 'pkey', unique: 'key', foreign: 'fkey', index: 'idx', sequence: 'seq' } as const;

export class PostgresNamingStrategy extends UnderscoreNamingStrategy {
  override indexName(tableName: string, columns: string[], type: Parameters<UnderscoreNamingStrategy['indexName']>[2]) {
    const suffix = SUFFIX[type as keyof typeof SUFFIX];
    if (!suffix) return super.indexName(tableName, columns, type);
    const table = tableName.includes('.') ? tableName.slice(tableName.indexOf('.') + 1) : tableName;
    return pgObjectName(table, type === 'primary' ? '' : columns.join('_'), suffix);
  }
}

/** PostgreSQL's makeObjectName: `name1_name2_label`, the longer of the two names clipped first to fit 63 bytes. */
export function pgObjectName(name1: string, name2: string, label: string): string {
  const available = 63 - (label.length + 1) - (name2 ? 1 : 0);
  let n1 = name1.length;
  let n2 = name2.length;
  while (n1 + n2 > available) {
    if (n1 > n2) n1--;
    else n2--;
  }
  return [name1.slice(0, n1), name2.slice(0, n2), label].filter(Boolean).join('_');
}
