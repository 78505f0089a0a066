import type { FencingConfig } from '../config/schema.js'
import { qualifiedName, quoteLiteral } from '../rewrite/sql-text.js'
import { fencedTables } from '../rewrite/tables.js'
import { rowFenceTrigger } from './trigger-names.js'
import { rowFunctionNameSql } from './fence-triggers.js'

/**
 * One catalog query (simple protocol) listing the configured row-fenced tables, by their index
 * in `fencing.tables`, that have a row trigger of `pgfence migrate` (fence-triggers.ts), with
 * what it was installed with: its arguments (token setting, requireToken, rejectUnissuedTokens,
 * each followed by a zero byte in the catalog, booleans as PostgreSQL prints them), whether it
 * calls the function of the configured fence column, and how it is enabled. Names resolve as
 * PostgreSQL resolves them in the session. Columns: ord, enabled, setting, required, unissued,
 * same_column.
 */
export function installedTriggersSql(fencing: FencingConfig): string | null {
  const tables = fencedTables(fencing)
  if (tables.length === 0) return null
  const wanted = tables.map((table, ord) => {
    const rel = quoteLiteral(qualifiedName(table.schema, table.name))
    return `(${ord}, ${rel}, ${quoteLiteral(table.column)})`
  })
  const arg = (n: number) =>
    `pg_catalog.split_part(pg_catalog.encode(g.tgargs, 'escape'), E'\\\\000', ${n})`
  const functionName = rowFunctionNameSql('w.col', 'a.setting', `(a.unissued = 't')`)
  return `SELECT w.ord, g.tgenabled AS enabled, a.setting, a.required, a.unissued,
       (n.nspname = 'pgfence' AND p.proname = ${functionName}) AS same_column
  FROM (VALUES ${wanted.join(', ')}) AS w(ord, rel, col)
  JOIN pg_catalog.pg_trigger g ON g.tgrelid = pg_catalog.to_regclass(w.rel)
   AND g.tgname = ${quoteLiteral(rowFenceTrigger)}
  JOIN pg_catalog.pg_proc p ON p.oid = g.tgfoid
  JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
  CROSS JOIN LATERAL (SELECT ${arg(1)}, ${arg(2)}, ${arg(3)}) AS a(setting, required, unissued)
 ORDER BY 1`
}

/**
 * How a table's installed row trigger (a row of installedTriggersSql, or undefined for none)
 * differs from its rule in the config: null when no trigger fences the table (none, or
 * disabled); else the config's values that the trigger does not have yet, as `key: value`
 * (empty: it is up to date, and the table's rows are left to it).
 */
export function ruleChanges(
  row: Record<string, string | null> | undefined,
  ord: number,
  fencing: FencingConfig,
): string[] | null {
  if (!row || row.enabled === 'D') return null
  const table = fencing.tables[ord]!
  const flag = (value: boolean) => (value ? 't' : 'f')
  const changes: [boolean, string][] = [
    [row.same_column !== 't', `column: ${table.column}`],
    [row.setting !== fencing.setting, `setting: ${fencing.setting}`],
    [row.required !== flag(table.requireToken), `requireToken: ${table.requireToken}`],
    [
      row.unissued !== flag(fencing.rejectUnissuedTokens),
      `rejectUnissuedTokens: ${fencing.rejectUnissuedTokens}`,
    ],
    // Enabled only for origin or replica sessions, it misses the others.
    [row.enabled !== 'A', 'trigger enabled ALWAYS'],
  ]
  return changes.filter(([changed]) => changed).map(([, change]) => change)
}
