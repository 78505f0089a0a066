import type { FencingConfig } from '../config/schema.js'
import { fencedTables } from '../rewrite/tables.js'
import { quoteIdent } from '../rewrite/sql-text.js'
import { fenceHelpersSql } from './fence-helpers.js'
import { resourceFencesSql } from './resource-fences.js'
import { tokenSourceSql } from './token-source.js'

// Serialises concurrent migrations: CREATE OR REPLACE FUNCTION races otherwise.
const migrationLockKey = 0x7066656e6365

/**
 * Everything `pgfence migrate` runs, in one transaction, idempotently: the pgfence schema, the
 * helpers, the token source, the resource fences and any missing fence columns. Adding a column
 * with a constant default is a catalog-only change.
 */
export function installSql(fencing: FencingConfig): string {
  const columns = fencedTables(fencing).map((table) => {
    const relation = [table.schema, table.name]
      .filter((part): part is string => part !== undefined)
      .map(quoteIdent)
      .join('.')
    return `ALTER TABLE ${relation} ADD COLUMN IF NOT EXISTS ${quoteIdent(table.column)} bigint NOT NULL DEFAULT 0;`
  })
  return [
    'BEGIN;',
    `SELECT pg_advisory_xact_lock(${migrationLockKey});`,
    'CREATE SCHEMA IF NOT EXISTS pgfence;',
    'GRANT USAGE ON SCHEMA pgfence TO PUBLIC;',
    fenceHelpersSql.trim(),
    tokenSourceSql.trim(),
    resourceFencesSql.trim(),
    ...columns,
    'COMMIT;',
    '',
  ].join('\n')
}
