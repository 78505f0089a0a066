import { describe, expect, test } from 'vitest'
import { findCommentTokens } from '../../src/rewrite/comment-token.js'
import { highestParam, tokenize } from '../../src/rewrite/lexer.js'

const kinds = (sql: string): [string, string][] =>
  tokenize(sql).map((t) => [t.kind, sql.slice(t.start, t.end)])

const commentValues = (sql: string, key = 'fencing_token'): string[] =>
  findCommentTokens(sql, tokenize(sql), key).map((c) => c.value)

describe('tokenize', () => {
  test('string literals, with doubled quotes and backslash escapes', () => {
    expect(kinds("SELECT 'it''s /* no */', E'a\\'b -- no'")).toEqual([
      ['word', 'SELECT'],
      ['string', "'it''s /* no */'"],
      ['other', ','],
      ['string', "E'a\\'b -- no'"],
    ])
  })

  test('dollar quotes, tagged or not, and parameters', () => {
    expect(kinds('$1 $$ /* x */ $$ $fn$ -- $$ $fn$ $12')).toEqual([
      ['param', '$1'],
      ['string', '$$ /* x */ $$'],
      ['string', '$fn$ -- $$ $fn$'],
      ['param', '$12'],
    ])
  })

  test('dollar-quote tags of any length', () => {
    const tag = `$${'é'.repeat(300)}$`
    expect(kinds(`${tag} /* x */ ${tag} 1`)).toEqual([
      ['string', `${tag} /* x */ ${tag}`],
      ['number', '1'],
    ])
  })

  test('quoted identifiers and nested block comments', () => {
    expect(kinds('"a /* b" /* x /* y */ z */ U&"\\0069" -- end')).toEqual([
      ['quoted', '"a /* b"'],
      ['comment', '/* x /* y */ z */'],
      ['quoted', 'U&"\\0069"'],
      ['comment', '-- end'],
    ])
  })

  test('numbers and words; a $ inside a word is not a parameter', () => {
    expect(kinds('x1 foo$1 1.5e3 .5 0x1F')).toEqual([
      ['word', 'x1'],
      ['word', 'foo$1'],
      ['number', '1.5e3'],
      ['number', '.5'],
      ['number', '0x1F'],
    ])
    expect(highestParam(tokenize('SELECT $2, foo$9, $10'), 'SELECT $2, foo$9, $10')).toBe(10)
  })
})

describe('comment tokens', () => {
  test('plain, sqlcommenter among other keys, URL-encoded, line comments', () => {
    expect(commentValues('UPDATE t SET a = 1 /* fencing_token=102 */')).toEqual(['102'])
    expect(
      commentValues("/*traceparent='00-a-b',fencing_token='103'*/ UPDATE t SET a = 1"),
    ).toEqual(['103'])
    expect(commentValues("UPDATE t /*app='x%2Cy',fencing_token='1%30'*/")).toEqual(['10'])
    expect(commentValues('UPDATE t SET a = 1 -- fencing_token=104\n')).toEqual(['104'])
  })

  test('never inside literals, dollar quotes or identifiers', () => {
    expect(
      commentValues(
        'SELECT \'/* fencing_token=1 */\', $$-- fencing_token=2$$, "/*fencing_token=3*/"',
      ),
    ).toEqual([])
  })

  test('only the configured key, not a key that merely ends with it', () => {
    expect(commentValues('/* my_fencing_token=5 */')).toEqual([])
    expect(commentValues('/* lease=5 */', 'lease')).toEqual(['5'])
  })
})
