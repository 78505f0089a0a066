/**
 * A small PostgreSQL lexer: just enough to tell comments, string literals, numbers, parameters
 * and quoted identifiers apart, so that text inside a literal or an identifier is never taken for
 * a comment and literals can be normalised away for the rewrite cache.
 */

export type TokenKind = 'comment' | 'string' | 'number' | 'param' | 'quoted' | 'word' | 'other'

export interface Token {
  kind: TokenKind
  start: number
  end: number
}

const identStart = /[A-Za-z_\u0080-\uffff]/
const identRest = /[A-Za-z0-9_$\u0080-\uffff]*/y
const digit = /[0-9]/
const dollarTag = /^\$([A-Za-z_\u0080-\uffff][A-Za-z0-9_\u0080-\uffff]*)?\$/

/** Splits SQL text into tokens; whitespace is skipped, unterminated constructs run to the end. */
export function tokenize(sql: string): Token[] {
  const tokens: Token[] = []
  let i = 0
  while (i < sql.length) {
    const code = sql.charCodeAt(i)
    // PostgreSQL whitespace: space, \t, \n, \v, \f, \r.
    if (code === 32 || (code >= 9 && code <= 13)) {
      i++
      continue
    }
    const start = i
    const [kind, end] = scanToken(sql, i)
    tokens.push({ kind, start, end })
    i = end
  }
  return tokens
}

function scanToken(sql: string, i: number): [TokenKind, number] {
  const ch = sql[i]!
  const next = sql[i + 1] ?? ''
  if (ch === '-' && next === '-') return ['comment', lineEnd(sql, i)]
  if (ch === '/' && next === '*') return ['comment', blockCommentEnd(sql, i)]
  if (ch === "'") return ['string', quotedEnd(sql, i + 1, "'", false)]
  if (ch === '"') return ['quoted', quotedEnd(sql, i + 1, '"', false)]
  if ((ch === 'E' || ch === 'e') && next === "'")
    return ['string', quotedEnd(sql, i + 2, "'", true)]
  if (/[BbXxNn]/.test(ch) && next === "'") return ['string', quotedEnd(sql, i + 2, "'", false)]
  if ((ch === 'U' || ch === 'u') && next === '&' && (sql[i + 2] === "'" || sql[i + 2] === '"')) {
    const quote = sql[i + 2]!
    return [quote === "'" ? 'string' : 'quoted', quotedEnd(sql, i + 3, quote, false)]
  }
  if (ch === '$') return scanDollar(sql, i)
  if (digit.test(ch) || (ch === '.' && digit.test(next))) return ['number', numberEnd(sql, i)]
  if (identStart.test(ch)) {
    identRest.lastIndex = i + 1
    identRest.test(sql)
    return ['word', identRest.lastIndex]
  }
  return ['other', i + 1]
}

function lineEnd(sql: string, i: number): number {
  const nl = sql.indexOf('\n', i)
  return nl < 0 ? sql.length : nl
}

/** PostgreSQL block comments nest. */
function blockCommentEnd(sql: string, i: number): number {
  let depth = 0
  let j = i
  while (j < sql.length) {
    if (sql[j] === '/' && sql[j + 1] === '*') {
      depth++
      j += 2
    } else if (sql[j] === '*' && sql[j + 1] === '/') {
      depth--
      j += 2
      if (depth === 0) return j
    } else j++
  }
  return sql.length
}

/** End of a quoted run starting after the opening quote; a doubled quote is an escaped quote. */
function quotedEnd(sql: string, j: number, quote: string, backslashEscapes: boolean): number {
  while (j < sql.length) {
    const c = sql[j]!
    if (backslashEscapes && c === '\\') j += 2
    else if (c === quote) {
      if (sql[j + 1] === quote) j += 2
      else return j + 1
    } else j++
  }
  return sql.length
}

function scanDollar(sql: string, i: number): [TokenKind, number] {
  if (digit.test(sql[i + 1] ?? '')) {
    let j = i + 1
    while (j < sql.length && digit.test(sql[j]!)) j++
    return ['param', j]
  }
  const tag = dollarTag.exec(sql.slice(i, i + 256))
  if (!tag) return ['other', i + 1]
  const close = sql.indexOf(tag[0], i + tag[0].length)
  return ['string', close < 0 ? sql.length : close + tag[0].length]
}

function numberEnd(sql: string, i: number): number {
  const match =
    /^(0[xXoObB][0-9A-Fa-f_]+|[0-9][0-9_]*(\.[0-9_]*)?([eE][+-]?[0-9]+)?|\.[0-9_]+([eE][+-]?[0-9]+)?)/.exec(
      sql.slice(i, i + 512),
    )
  return i + (match ? match[0].length : 1)
}

/** Highest `$n` parameter number in the text (0 when there is none). */
export function highestParam(tokens: Token[], sql: string): number {
  let highest = 0
  for (const token of tokens) {
    if (token.kind === 'param')
      highest = Math.max(highest, Number(sql.slice(token.start + 1, token.end)))
  }
  return highest
}
