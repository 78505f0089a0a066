import type { FencedTableConfig, FencingConfig } from '../config/schema.js'

/** A fenced table as PostgreSQL names it: identifiers already folded or unquoted. */
export interface FencedTable {
  schema: string | undefined
  name: string
  column: string
  requireToken: boolean
}

/** The relation a statement writes, as the parser gives it. */
export interface RangeVar {
  schemaname?: string
  relname: string
  catalogname?: string
  alias?: { aliasname: string }
}

const identifier = /^(?:"((?:[^"]|"")+)"|([A-Za-z_\u0080-\uffff][A-Za-z0-9_$\u0080-\uffff]*))$/

/** One identifier with PostgreSQL's rules: unquoted folds to lower case, quoted keeps case. */
function parseIdentifier(text: string, what: string): string {
  const match = identifier.exec(text.trim())
  if (!match) throw new Error(`${what} ${JSON.stringify(text)} is not a valid identifier`)
  return match[1] !== undefined
    ? match[1].replace(/""/g, '"')
    : match[2]!.replace(/[A-Z]+/g, (c) => c.toLowerCase())
}

/** Reads `[schema.]table` as PostgreSQL would: dots inside quotes belong to the name. */
export function parseTableName(name: string): { schema: string | undefined; name: string } {
  const parts = name.match(/"(?:[^"]|"")*"|[^.]+/g) ?? []
  if (parts.join('.') !== name || parts.length > 2) {
    throw new Error(`fenced table name ${JSON.stringify(name)} is not a valid [schema.]table name`)
  }
  const [first, second] = parts.map((part) => parseIdentifier(part, 'fenced table name part'))
  return second === undefined
    ? { schema: undefined, name: first! }
    : { schema: first, name: second }
}

export function fencedTables(fencing: FencingConfig): FencedTable[] {
  return fencing.tables.map((table: FencedTableConfig) => ({
    ...parseTableName(table.name),
    column: parseIdentifier(table.column, 'fence column'),
    requireToken: table.requireToken,
  }))
}

/**
 * The fenced table a relation reference may resolve to. An unqualified reference matches a
 * schema-qualified rule too, because search_path may resolve it there: fail closed.
 */
export function matchTable(tables: FencedTable[], range: RangeVar): FencedTable | undefined {
  return tables.find(
    (table) =>
      table.name === range.relname &&
      (table.schema === undefined ||
        range.schemaname === undefined ||
        table.schema === range.schemaname),
  )
}
