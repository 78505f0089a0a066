import type { FencingConfig } from '../config/schema.js'
import { qualifiedName, quoteLiteral } from '../rewrite/sql-text.js'
import { resourceTables } from '../rewrite/tables.js'
import { columnFixes, columnProblems, describeFix } from './fence-columns.js'
import { resourceGateTriggers, sqlArray } from './trigger-names.js'
import { installedTriggersSql, ruleChanges } from './fence-trigger-status.js'
import { configuredNames, resolveTables, type Queryable } from './resolve-tables.js'
import { installedVersion, installedVersionSql, schemaMismatch } from './schema-version.js'
import { unfencedDescendant, unfencedDescendantsSql } from './unfenced-descendants.js'

/**
 * `pgfence migrate --check`: what differs between the database and what `pgfence migrate` with
 * this config would leave (empty: nothing). Read-only: catalog queries only.
 */
export async function schemaDifferences(
  client: Queryable,
  fencing: FencingConfig,
): Promise<string[]> {
  const differences: string[] = []
  const installed = installedVersion((await client.query(installedVersionSql)).rows[0])
  const mismatch = schemaMismatch(installed)
  if (mismatch) differences.push(installed === null ? 'no pgfence schema' : mismatch.message)
  const { tables, problems } = await resolveTables(client, fencing)
  differences.push(...problems.map((problem) => problem.message))
  for (const table of tables) {
    if (table.column !== undefined && table.existingColumn === null)
      differences.push(`fenced table ${table.text} has no fence column ${table.column}`)
  }
  differences.push(...(await columnProblems(client, tables)))
  differences.push(...columnFixes(tables).map((fix) => `fence column ${describeFix(fix)}`))
  if (installed === null) return differences
  const resolved = new Set(tables.map((table) => table.text))
  differences.push(...(await triggerDifferences(client, fencing, resolved)))
  return differences
}

/** A row as the proxy decodes it (ruleChanges reads booleans as PostgreSQL prints them). */
const asText = (row: Record<string, unknown>): Record<string, string | null> =>
  Object.fromEntries(
    Object.entries(row).map(([key, value]) => [
      key,
      typeof value === 'boolean' ? (value ? 't' : 'f') : value === null ? null : String(value),
    ]),
  )

/** Row triggers, resource gates and descendants that lack theirs. */
async function triggerDifferences(
  client: Queryable,
  fencing: FencingConfig,
  resolved: Set<string>,
): Promise<string[]> {
  const differences: string[] = []
  const triggersSql = installedTriggersSql(fencing)
  if (triggersSql !== null) {
    const { rows } = await client.query(triggersSql)
    const byOrd = new Map(rows.map((row) => [Number(row.ord), asText(row)]))
    fencing.tables.forEach((table, ord) => {
      if (!resolved.has(table.name)) return
      const changes = ruleChanges(byOrd.get(ord), ord, fencing)
      if (changes === null)
        differences.push(`fenced table ${table.name} has no enabled fence trigger`)
      else if (changes.length > 0)
        differences.push(`fence trigger of ${table.name} lacks ${changes.join(', ')}`)
    })
  }
  for (const member of resourceTables(fencing)) {
    if (member.resource.kind !== 'fixed') continue
    const relation = qualifiedName(member.schema, member.name)
    const { rows } = await client.query(
      `SELECT count(*)::int AS n FROM pg_catalog.pg_trigger
        WHERE tgrelid = pg_catalog.to_regclass(${quoteLiteral(relation)})
          AND tgname = ANY (${sqlArray(resourceGateTriggers)})`,
    )
    if (rows[0]?.n !== resourceGateTriggers.length)
      differences.push(
        `member table ${relation} of resource ${member.resource.name} has no gate triggers`,
      )
  }
  const descendantsSql = unfencedDescendantsSql(fencing)
  if (descendantsSql !== null) {
    const configured = configuredNames(fencing)
    const { rows } = await client.query(descendantsSql)
    differences.push(...rows.map((row) => unfencedDescendant(row, configured).reason!.message))
  }
  return differences
}
