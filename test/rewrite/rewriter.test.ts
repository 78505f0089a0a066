import { beforeEach, describe, expect, test } from 'vitest'
import { parseConfig } from '../../src/config/load.js'
import { createRewriter, type FencingRewriter } from '../../src/rewrite/rewriter.js'

const fencing = parseConfig({
  fencing: {
    tables: [
      { name: 'invoices' },
      { name: 'billing."Ledger"', column: '"Fence"', requireToken: false },
    ],
  },
}).fencing

let rewriter: FencingRewriter
beforeEach(async () => {
  rewriter = await createRewriter(fencing)
})

describe('pass-through', () => {
  test('statements that cannot touch a fenced table are not parsed', () => {
    for (const sql of [
      'SELECT 1',
      'UPDATE orders SET a = 1',
      'SET app.fencing_token = 5',
      'BEGIN',
    ]) {
      expect(rewriter.rewriteQuery(sql)).toBeNull()
      expect(rewriter.rewriteParse(sql)).toBeNull()
    }
    expect(rewriter.parses).toBe(0)
  })

  test('reads and writes elsewhere that mention a fenced name pass unchanged', () => {
    expect(rewriter.rewriteQuery('SELECT * FROM invoices WHERE id = 1')).toBeNull()
    expect(rewriter.rewriteQuery("UPDATE invoices_archive SET note = 'invoices'")).toBeNull()
    expect(rewriter.rewriteQuery('COPY invoices TO STDOUT')).toBeNull()
    expect(rewriter.rewriteQuery('UPDATE other."Ledger" SET a = 1')).toBeNull()
    expect(rewriter.rewriteQuery('UPDATE billing.ledger SET a = 1')).toBeNull()
    expect(rewriter.rewriteQuery('ALTER TABLE invoices ADD COLUMN note text')).toBeNull()
  })
})

describe('write shapes', () => {
  test('UPDATE: the SET advances the fence, the WHERE stays as written', () => {
    const out = rewriter.rewriteQuery("UPDATE invoices AS i SET status = 'PAID' WHERE i.id = 99")!
    expect(out).toContain(
      "fencing_token = pgfence.advance_token(i.fencing_token, NULL, 'app.fencing_token', true, '\"invoices\"', 'fencing_token', false)",
    )
    expect(out).toMatch(/ WHERE i\.id = 99$/)
  })

  test('DELETE: the gate re-checks the original condition', () => {
    const out = rewriter.rewriteQuery('DELETE FROM invoices WHERE id IN (SELECT id FROM x)')!
    expect(out).toContain(
      'CASE WHEN id IN (SELECT id FROM x) THEN pgfence.admits(invoices.fencing_token, NULL,',
    )
  })

  test('INSERT: every VALUES row, SELECT arms and DEFAULT VALUES get the token column', () => {
    expect(
      rewriter.rewriteQuery("INSERT INTO invoices (id, status) VALUES (1, 'a'), (2, 'b')"),
    ).toMatch(
      /^INSERT INTO invoices \(id, status, fencing_token\) VALUES \(1, 'a', COALESCE\(pgfence\.token\(.*\), 0\)\), \(2, 'b', COALESCE/,
    )
    expect(rewriter.rewriteQuery('INSERT INTO invoices (id) SELECT 1 UNION ALL SELECT 2')).toMatch(
      /SELECT 1, COALESCE\(.*\) UNION ALL SELECT 2, COALESCE\(/,
    )
    expect(rewriter.rewriteQuery('INSERT INTO invoices DEFAULT VALUES')).toMatch(
      /^INSERT INTO invoices \(fencing_token\) VALUES \(COALESCE/,
    )
  })

  test('DEFAULT for the fence column leaves it to pgfence; any other value is refused', () => {
    const token =
      /COALESCE\(pgfence\.token\(NULL, 'app\.fencing_token', true, '"invoices"', 'fencing_token'\), 0\)/
    expect(
      rewriter.rewriteQuery(
        "INSERT INTO invoices (id, fencing_token, status) VALUES (1, DEFAULT, 'a'), (2, DEFAULT, 'b')",
      ),
    ).toMatch(
      new RegExp(
        `^INSERT INTO invoices \\(id, status, fencing_token\\) VALUES \\(1, 'a', ${token.source}\\), \\(2, 'b', ${token.source}\\)$`,
      ),
    )
    expect(
      rewriter.rewriteParse(
        'INSERT INTO invoices (id, fencing_token) VALUES ($1, DEFAULT) ON CONFLICT (id) DO UPDATE SET status = excluded.status, fencing_token = excluded.fencing_token',
      ),
    ).toMatch(
      /^INSERT INTO invoices \(id, fencing_token\) VALUES \(\$1, COALESCE\(.*\)\) ON CONFLICT \(id\) DO UPDATE SET status = excluded\.status, fencing_token = pgfence\.advance_token\(/,
    )
    expect(
      rewriter.rewriteQuery(
        'MERGE INTO invoices i USING src s ON i.id = s.id WHEN NOT MATCHED THEN INSERT (id, fencing_token) VALUES (s.id, DEFAULT)',
      ),
    ).toMatch(/THEN INSERT \(id, fencing_token\) VALUES \(s\.id, COALESCE\(pgfence\.token\(/)
    for (const sql of [
      "INSERT INTO invoices (id, fencing_token) VALUES (1, DEFAULT), (2, '7')",
      'INSERT INTO invoices (id, fencing_token) SELECT 1, 7',
      'INSERT INTO invoices (id) VALUES (1) ON CONFLICT (id) DO UPDATE SET fencing_token = excluded.fencing_token + 1',
      'MERGE INTO invoices i USING src s ON i.id = s.id WHEN NOT MATCHED THEN INSERT (id, fencing_token) VALUES (s.id, 7)',
    ]) {
      expect(rewriter.rewriteQuery(sql)).toMatch(
        /^SELECT pgfence\.refuse\('PF501', 'the fence column of a fenced table cannot be written directly'/,
      )
    }
  })

  test('quoted, schema-qualified and configured columns follow PostgreSQL name rules', () => {
    const out = rewriter.rewriteQuery('UPDATE billing."Ledger" SET a = 1')!
    expect(out).toContain(
      '"Fence" = pgfence.advance_token("Ledger"."Fence", NULL, \'app.fencing_token\', false',
    )
    expect(rewriter.rewriteQuery('UPDATE "Ledger" SET a = 1')).not.toBeNull()
    expect(rewriter.rewriteQuery('UPDATE INVOICES SET a = 1')).not.toBeNull()
    expect(rewriter.rewriteQuery('UPDATE U&"\\0069nvoices" SET a = 1')).not.toBeNull()
    expect(rewriter.rewriteQuery('UPDATE "Invoices" SET a = 1')).toBeNull()
  })

  test('refusals become a statement that raises upstream and keeps the parameters', () => {
    expect(rewriter.rewriteQuery('TRUNCATE invoices')).toMatch(
      /^SELECT pgfence\.refuse\('PF501', 'TRUNCATE/,
    )
    expect(rewriter.rewriteParse('INSERT INTO invoices VALUES ($1, $2)')).toMatch(
      /^SELECT pgfence\.refuse\('PF501', .*\) FROM \(SELECT \$1, \$2\) AS p$/,
    )
    expect(rewriter.rewriteQuery('UPDATE invoices SET')).toMatch(
      /pgfence\.refuse\('PF501', 'statement on a fenced table could not be parsed'/,
    )
  })

  test('a named statement checks the usual session token inline, an unnamed one calls the helper', () => {
    const sql = 'UPDATE invoices SET status = $1 WHERE id = $2'
    const call = /pgfence\.advance_token\(invoices\.fencing_token, NULL, 'app\.fencing_token'/
    expect(rewriter.rewriteParse(sql)).toMatch(new RegExp(`fencing_token = ${call.source}`))
    const named = rewriter.rewriteParse(sql, true)
    expect(named).toMatch(
      /fencing_token = CASE WHEN pg_catalog\.current_setting\('app\.fencing_token', true\) ~ /,
    )
    expect(named).toMatch(new RegExp(`ELSE ${call.source}.* END WHERE`))
    // A comment token is a constant: the same rewrite either way.
    const commented = `${sql} /* fencing_token=5 */`
    expect(rewriter.rewriteParse(commented, true)).toBe(rewriter.rewriteParse(commented))
  })

  test('parameter numbering is kept', () => {
    expect(rewriter.rewriteParse('UPDATE invoices SET status = $2 WHERE id = $1')).toMatch(
      /^UPDATE invoices SET status = \$2,.* WHERE id = \$1$/,
    )
  })
})

describe('multi-statement queries and comment tokens', () => {
  test('untouched statements keep their text; a shared comment token marks the whole query', () => {
    const out = rewriter.rewriteQuery(
      "BEGIN; UPDATE invoices SET a = 1 /* fencing_token=7 */; select  'keep' /* fencing_token=7 */; COMMIT",
    )!
    const [first, second, third, fourth] = out.split(';')
    expect(first).toBe("/*pgfence:token='7'*/ BEGIN")
    expect(second).toContain("pgfence.stale(invoices.fencing_token, '7'")
    expect(third).toBe(" select  'keep' /* fencing_token=7 */")
    expect(fourth).toBe(' COMMIT')
  })

  test('statements with different comment tokens in one query are PF501', () => {
    for (const sql of [
      'UPDATE invoices SET a = 1 /* fencing_token=7 */; UPDATE invoices SET a = 2',
      'SELECT 1 /* fencing_token=7 */; SELECT 2 /* fencing_token=8 */',
    ]) {
      expect(rewriter.rewriteQuery(sql)).toMatch(
        /^SELECT pgfence\.refuse\('PF501', 'statements with different fencing tokens/,
      )
    }
  })

  test('a comment token marks a statement that names no fenced table; literals do not', () => {
    expect(rewriter.rewriteQuery("/*fencing_token='201'*/ SELECT pay(99)")).toBe(
      "/*pgfence:token='201'*/ /*fencing_token='201'*/ SELECT pay(99)",
    )
    expect(rewriter.rewriteParse('SELECT pay($1) -- fencing_token=abc')).toBe(
      "/*pgfence:token='-'*/ SELECT pay($1) -- fencing_token=abc",
    )
    expect(rewriter.rewriteQuery("SELECT '/* fencing_token=5 */'")).toBeNull()
    expect(rewriter.rewriteQuery('SELECT pay(99 /* fencing_token=5 */')).toBeNull()
  })

  test('a leading sqlcommenter comment belongs to the statement after it', () => {
    const out = rewriter.rewriteQuery("/*fencing_token='9',route='x'*/ UPDATE invoices SET a = 1")!
    expect(out).toContain("pgfence.stale(invoices.fencing_token, '9'")
  })
})

describe('cache', () => {
  test('a valid and an invalid comment token do not share a rewrite', () => {
    const shape = (token: string) =>
      rewriter.rewriteQuery(
        `UPDATE invoices SET status = 'A' WHERE id = 17 -- fencing_token=${token}`,
      )
    expect(shape('5')).toContain("CASE WHEN invoices.fencing_token > '5' THEN pgfence.stale(")
    expect(shape('5x')).toContain("pgfence.advance_token(invoices.fencing_token, '5x'")
    expect(shape('9223372036854775808')).toContain(
      "pgfence.advance_token(invoices.fencing_token, '9223372036854775808'",
    )
    expect(shape('9223372036854775807')).toContain("> '9223372036854775807' THEN")
  })

  test('statements that differ only in literals or token values share one parse', () => {
    const a = rewriter.rewriteQuery(
      "UPDATE invoices SET status = 'A' WHERE id = 17 /*fencing_token='5'*/",
    )
    const b = rewriter.rewriteQuery(
      "UPDATE invoices SET status = 'it''s' WHERE id = 18 /*fencing_token='6'*/",
    )
    expect(rewriter.parses).toBe(1)
    expect(rewriter.cacheSize).toBe(1)
    expect(a).toContain("status = 'A'")
    expect(a).toContain('id = 17')
    expect(a).toContain("pgfence.stale(invoices.fencing_token, '5'")
    expect(b).toContain("status = 'it''s'")
    expect(b).toContain('id = 18')
    expect(b).toContain("pgfence.stale(invoices.fencing_token, '6'")
  })

  test('a literal a placeholder cannot stand for falls back to the exact text', () => {
    const a = rewriter.rewriteQuery("UPDATE invoices SET due = due + interval '1 day' WHERE id = 1")
    const b = rewriter.rewriteQuery(
      "UPDATE invoices SET due = due + interval '2 days' WHERE id = 1",
    )
    expect(a).toContain("'1 day'")
    expect(b).toContain("'2 days'")
    const parses = rewriter.parses
    expect(
      rewriter.rewriteQuery("UPDATE invoices SET due = due + interval '1 day' WHERE id = 1"),
    ).toBe(a)
    expect(rewriter.parses).toBe(parses)
  })

  test('Parse texts are cached by exact text', () => {
    const sql = 'UPDATE invoices SET status = $1 WHERE id = $2'
    const first = rewriter.rewriteParse(sql)
    expect(rewriter.rewriteParse(sql)).toBe(first)
    expect(rewriter.parses).toBe(1)
  })
})
