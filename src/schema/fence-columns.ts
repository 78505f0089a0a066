import { qualifiedName, quoteIdent } from '../rewrite/sql-text.js'
import { maintenanceRole } from './fence-triggers.js'
import type { ExistingColumn, Queryable, ResolvedTable } from './resolve-tables.js'

/**
 * A fence column that was there before migrate (an ORM created it, say) must be what migrate
 * adds, `bigint NOT NULL DEFAULT 0`: the fence trigger takes the value an INSERT leaves in it for
 * a write to the column itself unless it is 0, so a NULL default refuses every insert (PF501),
 * and tokens are compared as bigint.
 */

/** A row-fenced table whose fence column is there already. */
type WithColumn = ResolvedTable & { column: string; existingColumn: ExistingColumn }

const withColumn = (table: ResolvedTable): table is WithColumn =>
  table.column !== undefined && table.existingColumn !== null

/** The fence column as migrate reports it: the configured table name and the column. */
const shown = (table: WithColumn) => `${table.text}.${table.column}`

/** What migrate sets on an existing bigint fence column: `DEFAULT 0`, `NOT NULL`, or both. */
export interface ColumnFix {
  table: WithColumn
  set: string[]
}

/** The bigint fence columns that lack `DEFAULT 0` or `NOT NULL`. */
export function columnFixes(tables: ResolvedTable[]): ColumnFix[] {
  return tables
    .filter(withColumn)
    .filter((table) => table.existingColumn.type === 'bigint')
    .map((table) => {
      const { default: value, notNull } = table.existingColumn
      return {
        table,
        set: [...(value === '0' ? [] : ['DEFAULT 0']), ...(notNull ? [] : ['NOT NULL'])],
      }
    })
    .filter((fix) => fix.set.length > 0)
}

/** The ALTER TABLE of one fix (SET NOT NULL scans the table under its ACCESS EXCLUSIVE lock). */
export function columnFixSql({ table, set }: ColumnFix): string {
  const column = quoteIdent(table.column)
  const actions = set.map((constraint) => `ALTER COLUMN ${column} SET ${constraint}`)
  return `ALTER TABLE ${qualifiedName(table.resolvedSchema, table.name)} ${actions.join(', ')};`
}

/** One line of migrate's report: `invoices.fencing_token: set DEFAULT 0, NOT NULL`. */
export const describeFix = ({ table, set }: ColumnFix): string =>
  `${shown(table)}: set ${set.join(', ')}`

/**
 * What keeps migrate from making the existing fence columns `bigint NOT NULL DEFAULT 0`, each
 * with the fix: another type (changing it rewrites the table: the user's call), or NULLs.
 */
export async function columnProblems(
  client: Queryable,
  tables: ResolvedTable[],
): Promise<string[]> {
  const problems: string[] = []
  for (const table of tables.filter(withColumn)) {
    const relation = qualifiedName(table.resolvedSchema, table.name)
    const column = quoteIdent(table.column)
    const { type, notNull } = table.existingColumn
    if (type !== 'bigint') {
      problems.push(
        `fence column ${shown(table)} is ${type}, and fencing tokens are bigint: change its type (ALTER TABLE ${relation} ALTER COLUMN ${column} TYPE bigint), then run pgfence migrate again`,
      )
      continue
    }
    if (notNull) continue
    const { rows } = await client.query(
      `SELECT count(*) AS nulls FROM ${relation} WHERE ${column} IS NULL`,
    )
    const nulls = Number(rows[0]?.nulls)
    if (nulls === 0) continue
    problems.push(
      `fence column ${shown(table)} is NULL in ${nulls} row${nulls === 1 ? '' : 's'}, so it cannot be made NOT NULL: set them to 0 on a direct connection (as a superuser or a member of ${maintenanceRole} once the table is fenced), with SET pgfence.maintenance = on; UPDATE ${relation} SET ${column} = 0 WHERE ${column} IS NULL; then run pgfence migrate again`,
    )
  }
  return problems
}
