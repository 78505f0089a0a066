import { findCommentTokens, isValidToken } from './comment-token.js'
import { highestParam, tokenize, type Token } from './lexer.js'
import { quoteLiteral } from './sql-text.js'

/** The comment keys pgfence reads: the fencing token and the resource name. */
export interface CommentKeys {
  token: string
  resource: string
}

/** The values one comment carries, by what they are; whether its token is a valid one. */
type CommentValues = Partial<Record<keyof CommentKeys, string>> & { tokenValid?: boolean }

/**
 * Where a statement's token-carrying comment is, and the SQL text that stands for each value
 * it carries (a placeholder or a literal).
 */
export interface CommentMark {
  position: number
  token?: string
  /** The token is valid, so the rewrite may compare it as a constant. */
  tokenValid?: boolean
  resource?: string
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

/** The comments that carry a value for any of the keys, by position in the text. */
function commentValues(
  sql: string,
  tokens: Token[],
  keys: CommentKeys,
): Map<number, CommentValues> {
  const found = new Map<number, CommentValues>()
  for (const kind of ['token', 'resource'] as const) {
    for (const comment of findCommentTokens(sql, tokens, keys[kind])) {
      found.set(comment.start, { ...found.get(comment.start), [kind]: comment.value })
    }
  }
  for (const values of found.values()) {
    if (values.token !== undefined) values.tokenValid = isValidToken(values.token)
  }
  return found
}

/** What a comment's token is, for the cache key: none, valid, or invalid. */
const tokenKind = (values: CommentValues): string =>
  values.token === undefined ? '' : values.tokenValid ? 'v' : 't'

/**
 * Texts whose comments carry different kinds of values (or a valid and an invalid token, which
 * are rewritten differently) must not share a cache key.
 */
const marker = (values: CommentValues): string =>
  `/*@${tokenKind(values)}${values.resource === undefined ? '' : 'r'}*/`

/** A marker as `marker` writes it: the token kind, and whether a resource follows. */
const MARKER = /^\/\*@([vt]?)(r?)\*\/$/

/**
 * The marks of a normalised text that has no parameters of its own (base 1), from its markers:
 * their values are the placeholders after the literals', in order, as `normalise` numbers them.
 */
export function marksOf(text: string): CommentMark[] {
  const tokens = tokenize(text)
  let next = highestParam(tokens, text)
  const marks: CommentMark[] = []
  for (const token of tokens) {
    const found = token.kind === 'comment' && MARKER.exec(text.slice(token.start, token.end))
    if (!found) continue
    const mark: CommentMark = { position: token.start }
    if (found[1]) {
      mark.token = `$${++next}`
      mark.tokenValid = found[1] === 'v'
    }
    if (found[2]) mark.resource = `$${++next}`
    marks.push(mark)
  }
  return marks
}

export function normalise(sql: string, tokens: Token[], keys: CommentKeys): Normalised {
  const base = highestParam(tokens, sql) + 1
  const valuesAt = commentValues(sql, tokens, keys)
  const literals: string[] = []
  const comments: { position: number; values: CommentValues }[] = []
  let text = ''
  let copied = 0
  for (const token of tokens) {
    if (token.kind !== 'string' && token.kind !== 'number' && token.kind !== 'comment') continue
    text += sql.slice(copied, token.start)
    copied = token.end
    if (token.kind === 'comment') {
      const values = valuesAt.get(token.start)
      if (values === undefined) {
        text += ' '
      } else {
        comments.push({ position: text.length, values })
        text += marker(values)
      }
    } else {
      literals.push(sql.slice(token.start, token.end))
      text += `$${base + literals.length - 1}`
    }
  }
  text += sql.slice(copied)
  const values = [...literals]
  const placeholder = (value: string | undefined): string | undefined => {
    if (value === undefined) return undefined
    values.push(quoteLiteral(value))
    return `$${base + values.length - 1}`
  }
  const marks = comments.map((c) => ({
    position: c.position,
    token: placeholder(c.values.token),
    tokenValid: c.values.tokenValid,
    resource: placeholder(c.values.resource),
  }))
  return { text, base, values, marks }
}

/** A normalised text with its markers blanked, as PostgreSQL may see it. */
export function withoutMarkers(text: string): string {
  let out = ''
  let copied = 0
  for (const token of tokenize(text)) {
    if (token.kind !== 'comment' || !MARKER.test(text.slice(token.start, token.end))) continue
    out += `${text.slice(copied, token.start)} `
    copied = token.end
  }
  return out + text.slice(copied)
}

/** Comment marks for rewriting the exact text: the values are baked in as literals. */
export function exactMarks(sql: string, tokens: Token[], keys: CommentKeys): CommentMark[] {
  return [...commentValues(sql, tokens, keys)].map(([position, values]) => ({
    position,
    token: values.token === undefined ? undefined : quoteLiteral(values.token),
    tokenValid: values.tokenValid,
    resource: values.resource === undefined ? undefined : quoteLiteral(values.resource),
  }))
}
