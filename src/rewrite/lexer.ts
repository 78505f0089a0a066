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

/** Sticky: matched in place, at any length, as PostgreSQL reads tags. */
const dollarTag = /\$([A-Za-z_\u0080-\uffff][A-Za-z0-9_\u0080-\uffff]*)?\$/y

// Character tests by code unit: this runs on every fenced statement, so no regular expressions
// or substrings per character.
const isDigit = (c: number): boolean => c >= 48 && c <= 57
const isLetter = (c: number): boolean => (c >= 65 && c <= 90) || (c >= 97 && c <= 122)
const isIdentStart = (c: number): boolean => isLetter(c) || c === 95 || c >= 0x80
const isIdentChar = (c: number): boolean => isIdentStart(c) || isDigit(c) || c === 36
const isHexDigit = (c: number): boolean =>
  isDigit(c) || (c >= 65 && c <= 70) || (c >= 97 && c <= 102)

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

/** Letters that prefix a string constant: B'…', X'…', N'…' (either case). */
const PREFIXED_STRING = new Set([66, 98, 88, 120, 78, 110])

function scanToken(sql: string, i: number): [TokenKind, number] {
  const ch = sql.charCodeAt(i)
  const next = sql.charCodeAt(i + 1)
  if (ch === 45 && next === 45) return ['comment', lineEnd(sql, i)] // --
  if (ch === 47 && next === 42) return ['comment', blockCommentEnd(sql, i)] // /*
  if (ch === 39) return ['string', quotedEnd(sql, i + 1, "'", false)]
  if (ch === 34) return ['quoted', quotedEnd(sql, i + 1, '"', false)]
  if ((ch === 69 || ch === 101) && next === 39) return ['string', quotedEnd(sql, i + 2, "'", true)]
  if (PREFIXED_STRING.has(ch) && next === 39) return ['string', quotedEnd(sql, i + 2, "'", false)]
  if ((ch === 85 || ch === 117) && next === 38) {
    const quote = sql[i + 2]
    if (quote === "'" || quote === '"') {
      return [quote === "'" ? 'string' : 'quoted', quotedEnd(sql, i + 3, quote, false)]
    }
  }
  if (ch === 36) return scanDollar(sql, i)
  if (isDigit(ch) || (ch === 46 && isDigit(next))) return ['number', numberEnd(sql, i)]
  if (isIdentStart(ch)) {
    let j = i + 1
    while (j < sql.length && isIdentChar(sql.charCodeAt(j))) j++
    return ['word', j]
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
  if (isDigit(sql.charCodeAt(i + 1))) {
    let j = i + 1
    while (j < sql.length && isDigit(sql.charCodeAt(j))) j++
    return ['param', j]
  }
  dollarTag.lastIndex = i
  const tag = dollarTag.exec(sql)
  if (!tag) return ['other', i + 1]
  const close = sql.indexOf(tag[0], i + tag[0].length)
  return ['string', close < 0 ? sql.length : close + tag[0].length]
}

/** Numeric constants: 42, 4.2, .42, 4e2, 1_000, 0x2A, 0o52, 0b101010. */
function numberEnd(sql: string, i: number): number {
  let j = i
  const second = sql.charCodeAt(i + 1)
  if (sql.charCodeAt(i) === 48 && PREFIXED_INTEGER.has(second)) {
    j = i + 2
    while (j < sql.length && (isHexDigit(sql.charCodeAt(j)) || sql.charCodeAt(j) === 95)) j++
    return j
  }
  j = digitsEnd(sql, j)
  if (sql.charCodeAt(j) === 46) j = digitsEnd(sql, j + 1)
  const e = sql.charCodeAt(j)
  if (e === 69 || e === 101) {
    let k = j + 1
    const sign = sql.charCodeAt(k)
    if (sign === 43 || sign === 45) k++
    if (isDigit(sql.charCodeAt(k))) j = digitsEnd(sql, k)
  }
  return j
}

/** 0x, 0o, 0b in either case. */
const PREFIXED_INTEGER = new Set([88, 120, 79, 111, 66, 98])

function digitsEnd(sql: string, j: number): number {
  while (j < sql.length && (isDigit(sql.charCodeAt(j)) || sql.charCodeAt(j) === 95)) j++
  return j
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
