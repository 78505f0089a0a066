import { readFileSync } from 'node:fs'

/**
 * The SQL files of the pgfence schema, `src/schema/sql/*.sql`. Found from this module's place
 * two levels under the package root, which holds for `src/schema` (tests) and `dist/schema`
 * (the built package, which ships `src/schema/sql`: see package.json `files`).
 */
const directory = new URL('../../src/schema/sql/', import.meta.url)

/** SQL text that goes into a file's `{{name}}` as it is (a literal, a number, an expression). */
export type SqlValues = Record<string, string | number | bigint>

/**
 * A SQL file with each `{{name}}` replaced by its value. Single braces are left to PostgreSQL
 * (pgfence.fill_template fills them in the database). A name without a value is an error;
 * `values` may hold more than the file uses (the words every file may refuse with).
 */
export function sqlFile(name: string, values: SqlValues = {}): string {
  const text = readFileSync(new URL(`${name}.sql`, directory), 'utf8')
  return text.replace(/\{\{([a-z_]+)\}\}/g, (_, key: string) => {
    const value = values[key]
    if (value === undefined) throw new Error(`${name}.sql: no value for {{${key}}}`)
    return String(value)
  })
}
