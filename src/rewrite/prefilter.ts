import { escapeRegex } from './sql-text.js'

/**
 * Cheap lexical test: can this text touch a fenced table at all? It must never say no to a
 * statement that does, so it is deliberately loose: any mention of a fenced table's name in any
 * case (a quoted name with its quotes doubled too), or a unicode-escaped identifier.
 */
export interface Prefilter {
  test: (sql: string) => boolean
  /** The lower-case texts of which the test looks for any, in any letter case. */
  needles: string[]
}

export function createPrefilter(tables: { name: string }[]): Prefilter {
  const needles = [
    ...new Set(
      tables.flatMap((t) => [t.name.toLowerCase(), t.name.toLowerCase().replace(/"/g, '""')]),
    ),
    'u&"',
  ]
  // One case-insensitive pattern: no lower-cased copy of every statement.
  const pattern = new RegExp(needles.map(escapeRegex).join('|'), 'i')
  return { test: (sql) => pattern.test(sql), needles }
}
