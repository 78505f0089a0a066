import type { FencingConfig } from '../config/schema.js'
import { fencedTables, resourceTables } from '../rewrite/tables.js'
import { qualifiedName, quoteLiteral } from '../rewrite/sql-text.js'
import { fenceDescendantsSql, recordRowFenceSql } from './fence-descendants.js'
import { fenceHelpersSql } from './fence-helpers.js'
import { fenceTriggersSql } from './fence-triggers.js'
import { leaseTableSql } from './lease-table.js'
import type { ResolvedTable } from './resolve-tables.js'
import { columnFixes, columnFixSql } from './fence-columns.js'
import { resourceFencesSql } from './resource-fences.js'
import { markVersionSql, refuseNewerSql } from './schema-version.js'
import { gateTableSql, resourceGatesSql } from './resource-gates.js'
import { tokenSourceSql } from './token-source.js'

// Serialises concurrent migrations: CREATE OR REPLACE FUNCTION races otherwise.
export const migrationLockKey = 0x7066656e6365

/**
 * Everything `pgfence migrate` runs, in one transaction, idempotently, over no pgfence schema or
 * an earlier version of it (schema-version.ts), which it then marks as its own: the pgfence schema, the
 * helpers, the token source, the lease table of the postgres lease store, the resource fences,
 * the maintenance role, the event trigger that
 * fences tables joining a fenced tree later (fence-descendants.ts), for each fenced table its
 * fence column if missing, its fence triggers (see fence-triggers.ts) and its record, and for
 * each member table of a fixed resource its gate (resource-gates.ts). Adding a
 * column with a constant default is a catalog-only change. With the tables the names resolved to
 * in the database (resolve-tables.ts), each is named with the schema it resolved in, and an
 * existing fence column gets the DEFAULT 0 and NOT NULL it lacks (fence-columns.ts).
 */
export function installSql(fencing: FencingConfig, resolved?: ResolvedTable[]): string {
  // `row`: a row-fenced table's name, else a resource member's (the two never overlap).
  const resolvedOf = (table: { schema: string | undefined; name: string }, row: boolean) =>
    resolved?.find(
      (r) => (r.column !== undefined) === row && r.name === table.name && r.schema === table.schema,
    )
  const regclass = (table: { schema: string | undefined; name: string }, row: boolean) => {
    const schema = resolvedOf(table, row)?.resolvedSchema ?? table.schema
    return `${quoteLiteral(qualifiedName(schema, table.name))}::regclass`
  }
  const fixes = columnFixes(resolved ?? [])
  const tables = fencedTables(fencing).map((table) => {
    const fix = fixes.find((f) => f.table === resolvedOf(table, true))
    const args = [
      regclass(table, true),
      quoteLiteral(table.column),
      quoteLiteral(fencing.setting),
      table.requireToken,
      fencing.rejectUnissuedTokens,
    ]
    const fence = `SELECT pgfence.fence_table(${args.join(', ')});\n${recordRowFenceSql(args)}`
    return fix ? `${columnFixSql(fix)}\n${fence}` : fence
  })
  // Members of a resource named by the session are gated by the proxy only (resource-gates.ts).
  const gates = resourceTables(fencing).flatMap(({ resource, ...table }) =>
    resource.kind === 'fixed'
      ? [
          gateTableSql([
            regclass(table, false),
            quoteLiteral(resource.name),
            quoteLiteral(fencing.setting),
            fencing.rejectUnissuedTokens,
          ]),
        ]
      : [],
  )
  return [
    'BEGIN;',
    `SELECT pg_advisory_xact_lock(${migrationLockKey});`,
    refuseNewerSql,
    'CREATE SCHEMA IF NOT EXISTS pgfence;',
    'GRANT USAGE ON SCHEMA pgfence TO PUBLIC;',
    fenceHelpersSql.trim(),
    tokenSourceSql.trim(),
    leaseTableSql.trim(),
    resourceFencesSql.trim(),
    fenceTriggersSql.trim(),
    resourceGatesSql.trim(),
    fenceDescendantsSql.trim(),
    ...tables,
    ...gates,
    markVersionSql,
    'COMMIT;',
    '',
  ].join('\n')
}
