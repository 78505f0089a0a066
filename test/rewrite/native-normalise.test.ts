import { describe, expect, test } from 'vitest'
import { tokenize } from '../../src/rewrite/lexer.js'
import { nativeRelayModule } from '../../src/proxy/native-relay.js'

const native = () => {
  expect(nativeRelayModule, 'the native relay is built by npm ci').not.toBeNull()
  return nativeRelayModule!
}

/** The relay's key for a text, and the literals it took out, as text. */
function normaliseNatively(sql: string): { key: string; literals: string[] } | null {
  const bytes = Buffer.from(sql)
  const result = native().normaliseQuery(bytes)
  if (result === null) return null
  const literals: string[] = []
  for (let i = 0; i < result.literals.length; i += 2) {
    const start = result.literals[i]!
    literals.push(bytes.subarray(start, start + result.literals[i + 1]!).toString())
  }
  return { key: result.key.toString(), literals }
}

/** The same normalisation from the TypeScript lexer: the two must agree on every text. */
function normaliseInTypeScript(sql: string): { key: string; literals: string[] } | null {
  const tokens = tokenize(sql)
  if (tokens.some((t) => t.kind === 'param')) return null
  let key = ''
  let copied = 0
  const literals: string[] = []
  for (const token of tokens) {
    if (token.kind !== 'string' && token.kind !== 'number') continue
    literals.push(sql.slice(token.start, token.end))
    key += `${sql.slice(copied, token.start)}$${literals.length}`
    copied = token.end
  }
  return { key: key + sql.slice(copied), literals }
}

const corpus = [
  "UPDATE pgbench_accounts SET abalance = abalance + -4021 WHERE aid = 77 /*fencing_token='1'*/",
  "UPDATE t SET a = 'it''s /* no */', b = E'a\\'b -- no' WHERE id = 1.5e3",
  'SELECT $$ /* x */ $$, $fn$ -- $$ $fn$, $a$ unterminated',
  'UPDATE "a /* b" /* x /* y */ z */ SET c = U&"\\0069" -- end 42',
  "UPDATE t SET v = B'101', w = X'1F', n = N'x', u = U&'d\\0061t' WHERE x1 = .5 AND foo$1 = 0x1F",
  'UPDATE t SET a = 1_000, b = 0o17, c = 0b1010, d = 4e, e = 4e+2 WHERE f = 1.',
  "UPDATE tëst SET ñame = 'ünïcode ✓', n = 7 WHERE k = 'x' -- fencing_token=9",
  "UPDATE t SET a = 1; DELETE FROM t WHERE b = 2; INSERT INTO t VALUES (3, 'c')",
  "SELECT 'unterminated",
  'SELECT /* unterminated',
  'x[1:2]::int4 - 3 + $ + $$',
  '',
]

describe('the native Query normalisation', () => {
  test.each(corpus)('agrees with the TypeScript lexer: %s', (sql) => {
    expect(normaliseNatively(sql)).toEqual(normaliseInTypeScript(sql))
  })

  test('literals become numbered placeholders; comments and identifiers stay', () => {
    expect(
      normaliseNatively("UPDATE t SET a = 'x', b = 42 WHERE id = 7 /* fencing_token=5 */"),
    ).toEqual({
      key: 'UPDATE t SET a = $1, b = $2 WHERE id = $3 /* fencing_token=5 */',
      literals: ["'x'", '42', '7'],
    })
  })

  test('a text with parameters of its own is left to the uncached path', () => {
    expect(normaliseNatively('UPDATE t SET a = $1 WHERE id = 2')).toBeNull()
  })

  test('bytes that are not UTF-8 are literal bytes like any other', () => {
    const bytes = Buffer.concat([
      Buffer.from("UPDATE t SET a = '"),
      Buffer.from([0xe9, 0xff]),
      Buffer.from("' WHERE \xe9 = 1", 'latin1'),
    ])
    const result = native().normaliseQuery(bytes)!
    expect(result.key.toString('latin1')).toBe('UPDATE t SET a = $1 WHERE \xe9 = $2')
    expect(result.literals).toEqual([17, 4, 32, 1])
  })
})
