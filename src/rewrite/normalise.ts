import { findCommentTokens } from './comment-token.js'
import { highestParam, type Token } from './lexer.js'
import { quoteLiteral } from './sql-text.js'

/** Where a statement's comment token is, and the SQL text that stands for its value. */
export interface CommentMark {
  position: number
  arg: string
}

/**
 * The statement with literals replaced by placeholders `$base...` and comments dropped, except
 * token-carrying ones, which become a fixed marker: texts that differ only in literal values or
 * token values share one key, one parse and one rewrite template.
 */
export interface Normalised {
  text: string
  /** Number of the first placeholder; lower numbers are the statement's own parameters. */
  base: number
  /** The text each placeholder stands for, in placeholder order. */
  values: string[]
  marks: CommentMark[]
}

const tokenMarker = '/*@*/'

export function normalise(sql: string, tokens: Token[], commentKey: string): Normalised {
  const base = highestParam(tokens, sql) + 1
  const commentValues = new Map(
    findCommentTokens(sql, tokens, commentKey).map((c) => [c.start, c.value]),
  )
  const literals: string[] = []
  const comments: { position: number; value: string }[] = []
  let text = ''
  let copied = 0
  for (const token of tokens) {
    if (token.kind !== 'string' && token.kind !== 'number' && token.kind !== 'comment') continue
    text += sql.slice(copied, token.start)
    copied = token.end
    if (token.kind === 'comment') {
      const value = commentValues.get(token.start)
      if (value === undefined) {
        text += ' '
      } else {
        comments.push({ position: text.length, value })
        text += tokenMarker
      }
    } else {
      literals.push(sql.slice(token.start, token.end))
      text += `$${base + literals.length - 1}`
    }
  }
  text += sql.slice(copied)
  return {
    text,
    base,
    values: [...literals, ...comments.map((c) => quoteLiteral(c.value))],
    marks: comments.map((c, i) => ({
      position: c.position,
      arg: `$${base + literals.length + i}`,
    })),
  }
}

/** Comment marks for rewriting the exact text: token values are baked in as literals. */
export function exactMarks(sql: string, tokens: Token[], commentKey: string): CommentMark[] {
  return findCommentTokens(sql, tokens, commentKey).map((c) => ({
    position: c.start,
    arg: quoteLiteral(c.value),
  }))
}
