import { describe, expect, test } from 'vitest'
import { tokenize } from '../../src/rewrite/lexer.js'
import { normalise } from '../../src/rewrite/normalise.js'
import { nativeRelayModule } from '../../src/relay/native-relay.js'

const keys = { token: 'fencing_token', resource: 'fencing_resource' }

/** The relay's normalisation of a text, as text. */
function normaliseNatively(sql: string): { text: string; values: string[] } | null {
  expect(nativeRelayModule, 'the native relay is built by npm ci').not.toBeNull()
  const result = nativeRelayModule!.normaliseQuery(Buffer.from(sql), keys)
  if (result === null) return null
  return { text: result.key.toString(), values: result.values.map((v) => v.toString()) }
}

/** The rewriter's normalisation of the same text: the relay must agree with it exactly. */
function normaliseInTypeScript(sql: string): { text: string; values: string[] } {
  const { text, values } = normalise(sql, tokenize(sql), keys)
  return { text, values }
}

const agreed = [
  "UPDATE pgbench_accounts SET abalance = abalance + -4021 WHERE aid = 77 /*fencing_token='1'*/",
  "UPDATE t SET a = 'it''s /* no */', b = E'a\\'b -- no' WHERE id = 1.5e3",
  'SELECT $$ /* x */ $$, $fn$ -- $$ $fn$, $a$ unterminated',
  `UPDATE t SET a = $${'é'.repeat(300)}$ /* kept */ 1 $${'é'.repeat(300)}$`,
  'UPDATE "a /* b" /* x /* y */ z */ SET c = U&"\\0069" -- end 42',
  "UPDATE t SET v = B'101', w = X'1F', n = N'x', u = U&'d\\0061t' WHERE x1 = .5 AND foo$1 = 0x1F",
  'UPDATE t SET a = 1_000, b = 0o17, c = 0b1010, d = 4e, e = 4e+2 WHERE f = 1.',
  "UPDATE tëst SET ñame = 'ünïcode ✓', n = 7 WHERE k = 'x' -- fencing_token=9",
  "UPDATE t SET a = 1; DELETE FROM t WHERE b = 2; INSERT INTO t VALUES (3, 'c')",
  "SELECT 'unterminated",
  'SELECT /* unterminated',
  'x[1:2]::int4 - 3 + $ + $$',
  '',
  // sqlcommenter: other pairs are dropped with the comment, the values become placeholders
  "/*traceparent='00-4bf92f-00f067-01',fencing_token='103'*/ UPDATE t SET a = 1",
  "UPDATE t SET a = 2 /*fencing_resource='jobs/7',fencing_token='12',route='%2Fx'*/",
  'UPDATE t SET a = 3 /* fencing_token = 1 */ -- fencing_resource=r1',
  'UPDATE t SET a = 4 /* fencing_token=9223372036854775808 */ /* fencing_token=abc */',
  'UPDATE t SET a = 5 /* my_fencing_token=5 */ /* fencing_token */ /* fencing_token= */',
  "UPDATE t SET a = 6 /* fencing_token='7 */ /* x,fencing_token=8,y */ /*-fencing_token=9*/",
  'UPDATE t SET a = 7 /* fencing_token=0099 */ /* fencing_token=9223372036854775807 */',
  'SELECT \'/* fencing_token=1 */\', $$-- fencing_token=2$$, "/*fencing_token=3*/"',
]

/** Texts whose comments the relay leaves to the rewriter: it could read them differently. */
const leftToTheRewriter = [
  'UPDATE t SET a = $1 WHERE id = 2',
  "UPDATE t SET a = 1 /*fencing_token='1%30'*/",
  'UPDATE t SET a = 1 /* fencing_token=\\1 */',
  'UPDATE t SET a = 1 /*\u00a0fencing_token=5 */',
  'UPDATE t SET a = 1 /* fencing_token\u3000=5 */',
  'UPDATE t SET a = 1 /* fencing_token=5ü */',
  'UPDATE t SET a = 1 /* fencing_token=5, fencing_token=6 */',
]

describe('the native Query normalisation', () => {
  test.each(agreed)('agrees with the rewriter: %s', (sql) => {
    expect(normaliseNatively(sql)).toEqual(normaliseInTypeScript(sql))
  })

  test.each(leftToTheRewriter)('leaves to the rewriter: %s', (sql) => {
    expect(normaliseNatively(sql)).toBeNull()
  })

  test('agrees with the rewriter on 5000 seeded random texts, or leaves them to it', () => {
    const pieces = [
      "'",
      "''",
      "E'",
      '\\',
      '$$',
      '$a$',
      '$1',
      '/*',
      '*/',
      '--',
      '\n',
      ' ',
      ',',
      '=',
      '-',
      'fencing_token',
      'fencing_resource',
      "'5'",
      '12',
      '1.5e3',
      '0x1F',
      'x',
      'é',
      '\u00a0',
      '"',
      "U&'",
      "B'",
      '%30',
      'UPDATE t SET a = ',
      ' WHERE id = ',
    ]
    let seed = 42
    const random = (n: number) => {
      seed = (seed * 1103515245 + 12345) % 2147483648
      return seed % n
    }
    let compared = 0
    for (let i = 0; i < 5000; i++) {
      const sql = Array.from({ length: 1 + random(12) }, () => pieces[random(pieces.length)]).join(
        '',
      )
      const native = normaliseNatively(sql)
      if (native === null) continue
      expect(native, sql).toEqual(normaliseInTypeScript(sql))
      compared++
    }
    expect(compared).toBeGreaterThan(2500)
  })

  test('literals and comment values become numbered placeholders, other comments a space', () => {
    expect(
      normaliseNatively(
        "UPDATE t SET a = 'x', b = 42 /* note */ WHERE id = 7 /* fencing_token=5 */",
      ),
    ).toEqual({
      text: 'UPDATE t SET a = $1, b = $2   WHERE id = $3 /*@v*/',
      values: ["'x'", '42', '7', "'5'"],
    })
  })

  test('bytes that are not UTF-8 are values like any other', () => {
    const bytes = Buffer.concat([
      Buffer.from("UPDATE t SET a = '"),
      Buffer.from([0xe9, 0xff]),
      Buffer.from("' WHERE \xe9 = 1", 'latin1'),
    ])
    const result = nativeRelayModule!.normaliseQuery(bytes, keys)!
    expect(result.key.toString('latin1')).toBe('UPDATE t SET a = $1 WHERE \xe9 = $2')
    expect(result.values).toEqual([bytes.subarray(17, 21), Buffer.from('1')])
  })
})
