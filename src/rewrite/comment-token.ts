import { escapeRegex } from './sql-text.js'
import type { Token } from './lexer.js'

/** A comment that carries the fencing token key, with the raw value it gives. */
export interface CommentToken {
  /** Position of the comment in the text. */
  start: number
  value: string
}

/** One pattern per key, made once: this runs on every statement that may touch a fenced table. */
const patterns = new Map<string, RegExp>()

function patternFor(key: string): RegExp {
  let pattern = patterns.get(key)
  if (pattern === undefined) {
    pattern = new RegExp(`(?:^|[\\s,*/-])${escapeRegex(key)}\\s*=\\s*('([^']*)'|[^\\s,'*/]+)`)
    patterns.set(key, pattern)
  }
  return pattern
}

/**
 * Finds `key=N`, `key='N'` (sqlcommenter, URL-encoded) in block and line comments. Only comment
 * tokens from the lexer are inspected, so literals and identifiers never count.
 */
export function findCommentTokens(sql: string, tokens: Token[], key: string): CommentToken[] {
  const found: CommentToken[] = []
  for (const token of tokens) {
    if (token.kind !== 'comment') continue
    const match = patternFor(key).exec(sql.slice(token.start, token.end))
    if (!match) continue
    found.push({
      start: token.start,
      value: match[2] !== undefined ? urlDecode(match[2]) : match[1]!,
    })
  }
  return found
}

function urlDecode(value: string): string {
  try {
    return decodeURIComponent(value)
  } catch {
    return value
  }
}

const HIGHEST_TOKEN = 9223372036854775807n

/** A token PostgreSQL accepts as is: digits only, at most 2^63-1 (else the helpers raise PF400). */
export function isValidToken(value: string): boolean {
  if (!/^[0-9]{1,19}$/.test(value)) return false
  // Up to 18 digits always fits: only 19 need the (slower) BigInt compare.
  return value.length < 19 || BigInt(value) <= HIGHEST_TOKEN
}
