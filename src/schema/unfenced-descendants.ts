import { quoteIdent, quoteLiteral } from '../rewrite/sql-text.js'
import type { UnresolvedName } from '../rewrite/tables.js'
import type { ConfiguredName } from './resolve-tables.js'

/** The triggers every member of a row-fenced table's tree has once fenced (fence-triggers.ts). */
const rowFenceTriggers = ['pgfence_fence_truncate', 'pgfence_fence_update']

const relationText = (name: ConfiguredName): string =>
  [name.schema, name.name]
    .filter((part): part is string => part !== undefined)
    .map(quoteIdent)
    .join('.')

/**
 * One catalog query (simple protocol) listing the partitions and inheritance children, at any
 * depth, of the configured row-fenced tables that lack a fence trigger: tables created or
 * attached after `pgfence migrate` where its event trigger (fence-descendants.ts) is missing.
 * Each name resolves as PostgreSQL resolves it in the session. Columns: ord, schema, name,
 * partition. Null when no name is row-fenced.
 */
export function unfencedDescendantsSql(names: ConfiguredName[]): string | null {
  const fenced = names
    .map((name, ord) => ({ name, ord }))
    .filter(({ name }) => name.column !== undefined)
    .map(({ name, ord }) => `(${ord}, ${quoteLiteral(relationText(name))})`)
  if (fenced.length === 0) return null
  const lacks = rowFenceTriggers
    .map(
      (trigger) => `NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger g
                      WHERE g.tgrelid = c.oid AND g.tgname = ${quoteLiteral(trigger)})`,
    )
    .join('\n      OR ')
  return `WITH RECURSIVE tree(ord, relid, depth) AS (
  SELECT w.ord, pg_catalog.to_regclass(w.rel)::oid, 0 FROM (VALUES ${fenced.join(', ')}) AS w(ord, rel)
  UNION ALL
  SELECT t.ord, i.inhrelid, t.depth + 1 FROM pg_catalog.pg_inherits i JOIN tree t ON i.inhparent = t.relid
)
SELECT DISTINCT t.ord, n.nspname AS schema, c.relname AS name, c.relispartition AS partition
  FROM tree t
  JOIN pg_catalog.pg_class c ON c.oid = t.relid
  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
 WHERE t.depth > 0 AND (${lacks})
 ORDER BY 1, 2, 3`
}

/** A descendant the query found: writes to it through pgfence are refused, with this reason. */
export function unfencedDescendant(
  row: Record<string, unknown>,
  names: ConfiguredName[],
): UnresolvedName {
  const schema = String(row.schema)
  const name = String(row.name)
  const text = `${quoteIdent(schema)}.${quoteIdent(name)}`
  const fenced = JSON.stringify(names[Number(row.ord)]?.text)
  const kind = row.partition === true || row.partition === 't' ? 'a partition' : 'a child'
  return {
    text,
    schema,
    name,
    reason: {
      message: `table ${text} is ${kind} of fenced table ${fenced} but has no fence triggers`,
      detail: `it was created or attached after pgfence migrate ran, and the database has no pgfence event trigger to fence it; writes to it through pgfence are refused`,
      hint: 'run pgfence migrate again (as a superuser once, to install its event trigger)',
    },
  }
}
