import type { FencingConfig } from '../config/schema.js'
import { qualifiedName, quoteLiteral } from '../rewrite/sql-text.js'
import { fencedTables } from '../rewrite/tables.js'
import { rowFenceTrigger } from './fence-descendants.js'
import { rowFunctionNameSql } from './fence-triggers.js'

/**
 * The arguments `pgfence migrate` gives a fenced table's row trigger (fence-triggers.ts), as the
 * catalog stores them: each followed by a zero byte, booleans as PostgreSQL prints them.
 */
const triggerArgs = (setting: string, required: boolean, unissued: boolean): Buffer =>
  Buffer.from(`${setting}\0${required ? 't' : 'f'}\0${unissued ? 't' : 'f'}\0`, 'utf8')

/**
 * One catalog query (simple protocol) listing the configured row-fenced tables, by their index
 * in `fencing.tables`, whose row trigger is installed as the config wants it: enabled always,
 * calling the function of its fence column, with the config's token setting, `requireToken` and
 * `rejectUnissuedTokens`. Their rows are left to the trigger; pgfence checks the others in the
 * statement too. Names resolve as PostgreSQL resolves them in the session. Column: ord.
 */
export function triggeredTablesSql(fencing: FencingConfig): string | null {
  const tables = fencedTables(fencing)
  if (tables.length === 0) return null
  const wanted = tables.map((table, ord) => {
    const args = triggerArgs(fencing.setting, table.requireToken, fencing.rejectUnissuedTokens)
    const rel = quoteLiteral(qualifiedName(table.schema, table.name))
    return `(${ord}, ${rel}, ${quoteLiteral(table.column)}, '${args.toString('hex')}')`
  })
  const setting = `${quoteLiteral(fencing.setting)}::text`
  const unissued = String(fencing.rejectUnissuedTokens)
  return `SELECT w.ord
  FROM (VALUES ${wanted.join(', ')}) AS w(ord, rel, col, args)
  JOIN pg_catalog.pg_trigger g ON g.tgrelid = pg_catalog.to_regclass(w.rel)
  JOIN pg_catalog.pg_proc p ON p.oid = g.tgfoid
  JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
 WHERE g.tgname = ${quoteLiteral(rowFenceTrigger)} AND g.tgenabled = 'A'
   AND g.tgargs = pg_catalog.decode(w.args, 'hex') AND n.nspname = 'pgfence'
   AND p.proname = ${rowFunctionNameSql('w.col', setting, unissued)}
 ORDER BY 1`
}
