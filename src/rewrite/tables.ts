import type { FencedTableConfig, FencingConfig } from '../config/schema.js'

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

const identifier = /^(?:"((?:[^"]|"")+)"|([A-Za-z_\u0080-\uffff][A-Za-z0-9_$\u0080-\uffff]*))$/

/**
 * One configured identifier, spelled exactly as the catalog (and an ORM) spells it: letter case
 * is kept, never folded. Double quotes are still accepted, for names with dots or other
 * characters.
 */
function parseIdentifier(text: string, what: string): string {
  const match = identifier.exec(text.trim())
  if (!match) throw new Error(`${what} ${JSON.stringify(text)} is not a valid identifier`)
  return match[1] !== undefined ? match[1].replace(/""/g, '"') : match[2]!
}

/** How to write a catalog name in the config: bare when it can be, else in double quotes. */
export function configIdentifier(name: string): string {
  const bare = identifier.exec(name)
  return bare?.[2] !== undefined ? name : `"${name.replace(/"/g, '""')}"`
}

/** Reads `[schema.]table` with exact spellings: dots inside quotes belong to the name. */
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

/** Two names PostgreSQL could resolve to the same table (see matchTable). */
function mayBeSame(
  a: { schema: string | undefined; name: string },
  b: { schema: string | undefined; name: string },
): boolean {
  return (
    a.name === b.name && (a.schema === undefined || b.schema === undefined || a.schema === b.schema)
  )
}

/** A config problem at a key path, in the shape zod issues take. */
export interface RuleIssue {
  code: 'custom'
  message: string
  path: (string | number)[]
}

/**
 * A table belongs to at most one rule, row or resource: names that could resolve to the same
 * table in two rules, and names that are not valid `[schema.]table` names, are config errors.
 */
export function overlappingRules(
  tables: { name: string }[],
  resources: { tables: string[] }[],
): RuleIssue[] {
  const issues: RuleIssue[] = []
  const seen: { parsed: ReturnType<typeof parseTableName>; text: string; rule: string }[] = []
  const check = (text: string, rule: string, path: (string | number)[]) => {
    let parsed: ReturnType<typeof parseTableName>
    try {
      parsed = parseTableName(text)
    } catch (err) {
      issues.push({ code: 'custom', message: (err as Error).message, path })
      return
    }
    const other = seen.find((entry) => mayBeSame(entry.parsed, parsed))
    if (other) {
      issues.push({
        code: 'custom',
        message: `table ${text} is in two fencing rules (${other.rule} and ${rule}); a table belongs to at most one`,
        path,
      })
    }
    seen.push({ parsed, text, rule })
  }
  tables.forEach((table, i) => check(table.name, `tables[${i}]`, ['tables', i, 'name']))
  resources.forEach((rule, i) =>
    rule.tables.forEach((table, j) =>
      check(table, `resources[${i}]`, ['resources', i, 'tables', j]),
    ),
  )
  return issues
}
