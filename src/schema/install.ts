import type { FencingConfig } from '../config/schema.js'
import { fencedTables } from '../rewrite/tables.js'
import { quoteIdent, quoteLiteral } from '../rewrite/sql-text.js'
import { fenceDescendantsSql, recordRowFenceSql } from './fence-descendants.js'
import { fenceHelpersSql } from './fence-helpers.js'
import { fenceTriggersSql } from './fence-triggers.js'
import type { ResolvedTable } from './resolve-tables.js'
import { resourceFencesSql } from './resource-fences.js'
import { tokenSourceSql } from './token-source.js'

// Serialises concurrent migrations: CREATE OR REPLACE FUNCTION races otherwise.
const migrationLockKey = 0x7066656e6365

/**
 * Everything `pgfence migrate` runs, in one transaction, idempotently: the pgfence schema, the
 * helpers, the token source, the resource fences, the maintenance role, the event trigger that
 * fences tables joining a fenced tree later (fence-descendants.ts), and for each fenced table
 * its fence column if missing, its fence triggers (see fence-triggers.ts) and its record. Adding a
 * column with a constant default is a catalog-only change. With the tables the names resolved to
 * in the database (resolve-tables.ts), each is named with the schema it resolved in.
 */
export function installSql(fencing: FencingConfig, resolved?: ResolvedTable[]): string {
  const schemaOf = (table: { schema: string | undefined; name: string }) =>
    resolved?.find(
      (r) => r.column !== undefined && r.name === table.name && r.schema === table.schema,
    )?.resolvedSchema ?? table.schema
  const tables = fencedTables(fencing).map((table) => {
    const relation = [schemaOf(table), table.name]
      .filter((part): part is string => part !== undefined)
      .map(quoteIdent)
      .join('.')
    const args = [
      `${quoteLiteral(relation)}::regclass`,
      quoteLiteral(table.column),
      quoteLiteral(fencing.setting),
      table.requireToken,
      fencing.rejectUnissuedTokens,
    ]
    return `SELECT pgfence.fence_table(${args.join(', ')});\n${recordRowFenceSql(args)}`
  })
  return [
    'BEGIN;',
    `SELECT pg_advisory_xact_lock(${migrationLockKey});`,
    'CREATE SCHEMA IF NOT EXISTS pgfence;',
    'GRANT USAGE ON SCHEMA pgfence TO PUBLIC;',
    fenceHelpersSql.trim(),
    tokenSourceSql.trim(),
    resourceFencesSql.trim(),
    fenceTriggersSql.trim(),
    fenceDescendantsSql.trim(),
    ...tables,
    'COMMIT;',
    '',
  ].join('\n')
}
