import type { FencingConfig } from '../config/schema.js'
import { qualifiedName, quoteIdent, quoteLiteral } from '../rewrite/sql-text.js'
import { fencedTables, resourceTables, type UnresolvedName } from '../rewrite/tables.js'
import { inheritanceWalk } from './inheritance-walk.js'
import type { ConfiguredName } from './resolve-tables.js'
import { resourceGateTriggers, rowFenceTriggers, sqlArray } from './trigger-names.js'

/**
 * One catalog query (simple protocol) listing the partitions and inheritance children, at any
 * depth, of the configured row-fenced tables and fixed resources' member tables that lack one
 * of their triggers: tables created or attached after `pgfence migrate` where its event trigger
 * (fence-descendants.ts) is missing. Each name resolves as PostgreSQL resolves it in the
 * session; `ord` is its place in configuredNames. An inheritance child without its row
 * triggers also makes its row-fenced ancestors unsafe (an UPDATE or DELETE of a parent changes
 * the child's rows too): they are listed with the child's name in `child`. Columns: ord, schema,
 * name, partition, child. Null when no name has triggers.
 */
export function unfencedDescendantsSql(fencing: FencingConfig): string | null {
  const rows = fencedTables(fencing).map((table) => ({ table, triggers: rowFenceTriggers }))
  const members = resourceTables(fencing).map((table) => ({
    table,
    triggers: table.resource.kind === 'fixed' ? resourceGateTriggers : [],
  }))
  const wanted = [...rows, ...members]
    .map(({ table, triggers }, ord) => ({ table, triggers, ord }))
    .filter(({ triggers }) => triggers.length > 0)
    .map(
      ({ table, triggers, ord }) =>
        `(${ord}, ${quoteLiteral(qualifiedName(table.schema, table.name))}, ${sqlArray(triggers)})`,
    )
  if (wanted.length === 0) return null
  // The walk of pgfence.inheritance_tree, run here rather than called: the check runs in
  // databases of any pgfence schema version, or none (schema-version.ts), and must not fail there.
  return `WITH RECURSIVE wanted(ord, relid, triggers) AS (
  SELECT w.ord, pg_catalog.to_regclass(w.rel)::oid, w.triggers
    FROM (VALUES ${wanted.join(', ')}) AS w(ord, rel, triggers)
), ${inheritanceWalk('(SELECT DISTINCT relid FROM wanted) AS s(r)')}, unfenced AS (
  SELECT w.ord, c.oid, c.relispartition, t.path, w.triggers
    FROM wanted w JOIN tree t ON t.root = w.relid JOIN pg_catalog.pg_class c ON c.oid = t.relid
   WHERE t.depth > 0
     AND NOT w.triggers <@ ARRAY(SELECT g.tgname::text FROM pg_catalog.pg_trigger g WHERE g.tgrelid = c.oid)
), listed AS (
  SELECT ord, oid AS relid, relispartition AS partition, NULL::text AS child FROM unfenced
  UNION ALL
  SELECT u.ord, a.relid, false, pg_catalog.format('%I.%I', n.nspname, c.relname)
    FROM unfenced u, LATERAL pg_catalog.unnest(u.path) AS a(relid),
         pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
   WHERE c.oid = u.oid AND NOT u.relispartition AND u.triggers = ${sqlArray(rowFenceTriggers)}
)
SELECT DISTINCT ON (l.ord, n.nspname, c.relname) l.ord, n.nspname AS schema, c.relname AS name,
       l.partition, l.child
  FROM listed l
  JOIN pg_catalog.pg_class c ON c.oid = l.relid
  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
 ORDER BY 1, 2, 3, 5 NULLS FIRST`
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
  const hint = 'run pgfence migrate again (as a superuser once, to install its event trigger)'
  if (typeof row.child === 'string') {
    return {
      text,
      schema,
      name,
      reason: {
        message: `table ${text} has a child, ${row.child}, with no fence triggers`,
        detail: `an UPDATE or DELETE of ${text} also changes the rows of ${row.child}, which joined fenced table ${fenced} after pgfence migrate ran; writes to it through pgfence are refused`,
        hint,
      },
    }
  }
  const kind = row.partition === true || row.partition === 't' ? 'a partition' : 'a child'
  return {
    text,
    schema,
    name,
    reason: {
      message: `table ${text} is ${kind} of fenced table ${fenced} but has no fence triggers`,
      detail: `it was created or attached after pgfence migrate ran, and the database has no pgfence event trigger to fence it; writes to it through pgfence are refused`,
      hint,
    },
  }
}
