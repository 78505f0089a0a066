import type { FencingConfig } from '../config/schema.js'
import { quoteLiteral } from '../rewrite/sql-text.js'
import { configIdentifier } from '../config/table-names.js'
import { fencedTables, resourceTables } from '../rewrite/tables.js'

/** A configured `[schema.]table` name, parsed, with the config text it came from. */
export interface ConfiguredName {
  text: string
  schema: string | undefined
  name: string
  /** The fence column, for a row-fenced table. */
  column?: string
}

/** A fence column that is there already, as the catalog describes it. */
export interface ExistingColumn {
  /** Its type, as format_type spells it (`bigint`). */
  type: string
  notNull: boolean
  /** Its default expression, as pg_get_expr gives it; null when it has none. */
  default: string | null
}

/** A table a configured name resolves to. */
export interface ResolvedTable extends ConfiguredName {
  /** The table's schema, as the catalog spells it. */
  resolvedSchema: string
  partition: boolean
  /** The fence column, when it is there already (a partition inherits it from its parent). */
  existingColumn: ExistingColumn | null
  /** A partition's parent table, `schema.table` in config spelling. */
  parent: string | null
}

/** A configured name that does not resolve to exactly one table. */
export interface NameProblem extends ConfiguredName {
  /** What is wrong and what to write instead. */
  message: string
  /** True when no table has the name's exact spelling: writes to its look-alikes are refused. */
  unresolved: boolean
}

export interface Resolution {
  tables: ResolvedTable[]
  problems: NameProblem[]
}

/** One catalog row: a relation whose name equals a configured one ignoring letter case. */
export interface CandidateRow {
  ord: number
  schema: string
  name: string
  kind: string
  partition: boolean
  /** Position of its schema in the search_path, null when it is not on it. */
  pathPosition: number | null
  existingColumn: ExistingColumn | null
  parent: string | null
}

/** Every `[schema.]table` name of the fencing config, row and resource rules alike. */
export function configuredNames(fencing: FencingConfig): ConfiguredName[] {
  const texts = [
    ...fencing.tables.map((t) => t.name),
    ...fencing.resources.flatMap((r) => r.tables),
  ]
  const parsed = [...fencedTables(fencing), ...resourceTables(fencing)]
  return parsed.map((table, i) => ({
    text: texts[i]!,
    schema: table.schema,
    name: table.name,
    column: 'column' in table ? table.column : undefined,
  }))
}

const literal = (value: string | undefined): string =>
  value === undefined ? 'NULL' : quoteLiteral(value)

/**
 * One catalog query (simple protocol, no parameters) listing, for each configured name, the
 * relations whose name equals it ignoring letter case, outside PostgreSQL's and pgfence's own
 * schemas. Columns: ord, schema, name, kind, partition, path_position, the fence column's
 * column_type, column_not_null and column_default (NULL when it is not there), parent.
 */
export function candidatesSql(names: ConfiguredName[]): string {
  const wanted = names
    .map(
      (n, i) =>
        `(${i}, ${literal(n.schema)}::text, ${literal(n.name)}::text, ${literal(n.column)}::text)`,
    )
    .join(', ')
  return `SELECT w.ord, n.nspname AS schema, c.relname AS name, c.relkind AS kind,
       c.relispartition AS partition,
       pg_catalog.array_position(pg_catalog.current_schemas(true), n.nspname::text) AS path_position,
       col.column_type, col.column_not_null, col.column_default,
       (SELECT pn.nspname || '.' || p.relname FROM pg_catalog.pg_inherits i
          JOIN pg_catalog.pg_class p ON p.oid = i.inhparent
          JOIN pg_catalog.pg_namespace pn ON pn.oid = p.relnamespace
         WHERE i.inhrelid = c.oid AND c.relispartition) AS parent
  FROM (VALUES ${wanted}) AS w(ord, nsp, rel, col)
  JOIN pg_catalog.pg_class c ON pg_catalog.lower(c.relname) = pg_catalog.lower(w.rel)
  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
  LEFT JOIN LATERAL (
    SELECT pg_catalog.format_type(a.atttypid, a.atttypmod) AS column_type,
           a.attnotnull AS column_not_null,
           pg_catalog.pg_get_expr(d.adbin, d.adrelid) AS column_default
      FROM pg_catalog.pg_attribute a
      LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
     WHERE a.attrelid = c.oid AND a.attname = w.col AND a.attnum > 0 AND NOT a.attisdropped
  ) AS col ON true
 WHERE (w.nsp IS NULL OR pg_catalog.lower(n.nspname) = pg_catalog.lower(w.nsp))
   AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
   AND n.nspname NOT LIKE 'pg\\_%' AND n.nspname NOT IN ('information_schema', 'pgfence')
 ORDER BY 1, 2, 3`
}

/** Reads the query's rows, as node-postgres or the text protocol gives them. */
export function candidateRow(row: Record<string, unknown>): CandidateRow {
  const bool = (value: unknown) => value === true || value === 't'
  const text = (value: unknown) => (value === null || value === undefined ? null : String(value))
  const type = text(row.column_type)
  return {
    ord: Number(row.ord),
    schema: String(row.schema),
    name: String(row.name),
    kind: String(row.kind),
    partition: bool(row.partition),
    pathPosition: row.path_position === null ? null : Number(row.path_position),
    existingColumn:
      type === null
        ? null
        : { type, notNull: bool(row.column_not_null), default: text(row.column_default) },
    parent: text(row.parent),
  }
}

const qualified = (row: CandidateRow): string =>
  `${configIdentifier(row.schema)}.${configIdentifier(row.name)}`

const TABLE_KINDS = new Set(['r', 'p'])

/**
 * The rule: each part of a configured name is the exact spelling of the catalog name (letter
 * case matters; double quotes optional). A qualified name names that table; an unqualified one
 * resolves through the search_path as PostgreSQL resolves it, and must not also name tables in
 * other schemas. Anything else is a problem that says what to write.
 */
export function resolveNames(names: ConfiguredName[], rows: CandidateRow[]): Resolution {
  const resolution: Resolution = { tables: [], problems: [] }
  names.forEach((configured, ord) => {
    const candidates = rows.filter((row) => row.ord === ord)
    const exact = candidates.filter(
      (row) =>
        row.name === configured.name &&
        (configured.schema === undefined || row.schema === configured.schema),
    )
    const problem = (message: string, unresolved = false) =>
      resolution.problems.push({ ...configured, message, unresolved })
    const shown = JSON.stringify(configured.text)
    if (exact.length === 0) {
      const others = candidates.map(qualified)
      problem(
        others.length === 0
          ? `fenced table ${shown} does not exist`
          : `fenced table ${shown} does not exist; names are case-sensitive, and the database has ${others.join(', ')}: write that name (e.g. name: ${others[0]})`,
        true,
      )
      return
    }
    if (exact.length > 1) {
      problem(
        `fenced table ${shown} names tables in several schemas (${exact.map(qualified).join(', ')}): write the schema, e.g. name: ${qualified(exact[0]!)}`,
      )
      return
    }
    const table = exact[0]!
    if (configured.schema === undefined && table.pathPosition === null) {
      problem(
        `fenced table ${shown} is not on the search_path: write the schema, name: ${qualified(table)}`,
      )
    } else if (!TABLE_KINDS.has(table.kind)) {
      problem(`fenced table ${shown} is not a table (${qualified(table)}): fence the table itself`)
    } else {
      resolution.tables.push({
        ...configured,
        resolvedSchema: table.schema,
        partition: table.partition,
        existingColumn: table.existingColumn,
        parent: table.parent,
      })
    }
  })
  return withPartitionProblems(resolution)
}

/**
 * A partition cannot get a column of its own: it inherits the fence column from its parent,
 * so a fenced partition without it needs its parent fenced (or the column added there).
 */
function withPartitionProblems({ tables, problems }: Resolution): Resolution {
  const key = (schema: string, name: string) => `${schema}.${name}`
  const fenced = new Set(tables.map((table) => key(table.resolvedSchema, table.name)))
  const orphan = (table: ResolvedTable) =>
    table.partition &&
    table.column !== undefined &&
    table.existingColumn === null &&
    !fenced.has(table.parent!)
  for (const table of tables.filter(orphan)) {
    problems.push({
      ...table,
      unresolved: false,
      message: `fenced table ${JSON.stringify(table.text)} is a partition of ${table.parent} and a partition inherits its columns: fence ${table.parent} too, or add column ${table.column} to it`,
    })
  }
  return { tables: tables.filter((table) => !orphan(table)), problems }
}

/** A client that runs a query and gives rows (node-postgres's Client and Pool). */
export interface Queryable {
  query(sql: string): Promise<{ rows: Record<string, unknown>[] }>
}

/** Resolves the config's table names in the database a client is connected to. */
export async function resolveTables(
  client: Queryable,
  fencing: FencingConfig,
): Promise<Resolution> {
  const names = configuredNames(fencing)
  if (names.length === 0) return { tables: [], problems: [] }
  const { rows } = await client.query(candidatesSql(names))
  return resolveNames(names, rows.map(candidateRow))
}
