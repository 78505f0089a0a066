import type { Token } from './lexer.js'

/** A comment that carries the fencing token key, with the raw value it gives. */
export interface CommentToken {
  /** Position of the comment in the text. */
  start: number
  value: string
}

const escapeRegex = (text: string): string => text.replace(/[.*+?^${}()|[\]\\-]/g, '\\$&')

/**
 * Finds `key=N`, `key='N'` (sqlcommenter, URL-encoded) in block and line comments. Only comment
 * tokens from the lexer are inspected, so literals and identifiers never count.
 */
export function findCommentTokens(sql: string, tokens: Token[], key: string): CommentToken[] {
  const pattern = new RegExp(`(?:^|[\\s,*/-])${escapeRegex(key)}\\s*=\\s*('([^']*)'|[^\\s,'*/]+)`)
  const found: CommentToken[] = []
  for (const token of tokens) {
    if (token.kind !== 'comment') continue
    const match = pattern.exec(sql.slice(token.start, token.end))
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
