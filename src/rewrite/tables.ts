import type { FencedTableConfig, FencingConfig } from '../config/schema.js'
import { mayBeSame, parseIdentifier, parseTableName } from '../config/table-names.js'

/** A fenced table as PostgreSQL names it: the exact spelling of its catalog name. */
export interface FencedTable {
  schema: string | undefined
  name: string
  column: string
  requireToken: boolean
  /**
   * Its fence trigger is known to be installed (and up to date) where the statement runs: the
   * trigger alone checks its rows. Otherwise pgfence also rewrites the statement to check them.
   */
  triggered: boolean
}

/** Which fenced tables have their fence trigger: all, none, or these indexes of the config. */
export type Triggered = 'all' | 'none' | ReadonlySet<number>

/** The relation a statement writes, as the parser gives it. */
export interface RangeVar {
  schemaname?: string
  relname: string
  catalogname?: string
  alias?: { aliasname: string }
}

/**
 * The fenced tables of a config. `triggered`: which of them (indexes into `fencing.tables`) have
 * their fence trigger where the rewrite is used.
 */
export function fencedTables(fencing: FencingConfig, triggered: Triggered = 'all'): FencedTable[] {
  return fencing.tables.map((table: FencedTableConfig, index) => ({
    ...parseTableName(table.name),
    column: parseIdentifier(table.column, 'fence column'),
    requireToken: table.requireToken,
    triggered: triggered === 'all' || (triggered !== 'none' && triggered.has(index)),
  }))
}

/**
 * The fenced table a relation reference may resolve to: the parser's name (folded or unquoted)
 * equals the configured spelling. An unqualified reference matches a schema-qualified rule too,
 * because search_path may resolve it there: fail closed.
 */
export function matchTable<T extends { schema: string | undefined; name: string }>(
  tables: T[],
  range: RangeVar,
): T | undefined {
  return tables.find((table) => mayBeSame(table, { schema: range.schemaname, name: range.relname }))
}

/**
 * A configured name that resolves to no table in the session's database, or a table that should
 * be fenced but is not (`reason`): writes to a relation that equals it ignoring letter case are
 * refused rather than passed unfenced.
 */
export interface UnresolvedName {
  text: string
  schema: string | undefined
  name: string
  /** The refusal's words, when not those of a misspelt name. */
  reason?: { message: string; detail: string; hint: string }
}

export function matchIgnoringCase(
  names: UnresolvedName[],
  range: RangeVar,
): UnresolvedName | undefined {
  const lower = (text: string | undefined) => text?.toLowerCase()
  return names.find((entry) =>
    mayBeSame(
      { schema: lower(entry.schema), name: entry.name.toLowerCase() },
      { schema: lower(range.schemaname), name: range.relname.toLowerCase() },
    ),
  )
}

/** Where a member table's resource name comes from. */
export type ResourceName = { kind: 'fixed'; name: string } | { kind: 'session' }

/** A table fenced by a resource: every write to it checks and raises that resource's fence. */
export interface ResourceTable {
  schema: string | undefined
  name: string
  resource: ResourceName
}

export function resourceTables(fencing: FencingConfig): ResourceTable[] {
  return fencing.resources.flatMap((rule) =>
    rule.tables.map((table) => ({
      ...parseTableName(table),
      resource:
        rule.resource === undefined
          ? ({ kind: 'session' } as const)
          : ({ kind: 'fixed', name: rule.resource } as const),
    })),
  )
}
