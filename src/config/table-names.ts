/**
 * Table names as the config writes them: `[schema.]table` with exact spellings, and the rule that
 * a table belongs to at most one fencing rule. The rewriter matches statements against them.
 */

const identifier = /^(?:"((?:[^"]|"")+)"|([A-Za-z_\u0080-\uffff][A-Za-z0-9_$\u0080-\uffff]*))$/

/**
 * One configured identifier, spelled exactly as the catalog (and an ORM) spells it: letter case
 * is kept, never folded. Double quotes are still accepted, for names with dots or other
 * characters.
 */
export function parseIdentifier(text: string, what: string): string {
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

/** Two names PostgreSQL could resolve to the same table (see matchTable). */
export function mayBeSame(
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
