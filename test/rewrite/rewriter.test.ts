import { beforeEach, describe, expect, test } from 'vitest'
import { parseConfig } from '../../src/config/load.js'
import { createRewriter, type FencingRewriter } from '../../src/rewrite/rewriter.js'
import { fillTemplate } from '../../src/rewrite/template.js'

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

/** Neither as a Query nor as a Parse does `sql` change on its way to PostgreSQL. */
function passesUnchanged(sql: string): void {
  expect(rewriter.rewriteQuery(sql)).toBeNull()
  expect(rewriter.rewriteParse(sql)).toBeNull()
}

describe('pass-through', () => {
  test('statements that cannot touch a fenced table are not parsed', () => {
    for (const sql of ['SELECT 1', 'UPDATE orders SET a = 1', 'SET app.fencing_token = 5', 'BEGIN'])
      passesUnchanged(sql)
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

const refusedFenceWrite =
  /^SELECT pgfence\.refuse\('PF501', 'the fence column of a fenced table cannot be written directly'/

describe('write shapes', () => {
  test('row writes reach PostgreSQL as written: the fence trigger is their check', () => {
    for (const sql of [
      "UPDATE invoices AS i SET status = 'PAID' WHERE i.id = 99",
      'DELETE FROM invoices WHERE id IN (SELECT id FROM x)',
      "INSERT INTO invoices (id, status) VALUES (1, 'a'), (2, 'b')",
      'INSERT INTO invoices (id) SELECT 1 UNION ALL SELECT 2',
      'INSERT INTO invoices DEFAULT VALUES',
      "INSERT INTO invoices VALUES (1, 'a')",
      'MERGE INTO invoices i USING src s ON i.id = s.id WHEN MATCHED THEN DELETE',
      'WITH d AS (DELETE FROM invoices RETURNING id) SELECT * FROM d',
    ])
      passesUnchanged(sql)
  })

  test('DEFAULT for the fence column leaves it to pgfence; any other value is refused', () => {
    for (const sql of [
      "INSERT INTO invoices (id, fencing_token, status) VALUES (1, DEFAULT, 'a'), (2, DEFAULT, 'b')",
      'INSERT INTO invoices (id, fencing_token) VALUES ($1, DEFAULT) ON CONFLICT (id) DO UPDATE SET status = excluded.status, fencing_token = excluded.fencing_token',
      'MERGE INTO invoices i USING src s ON i.id = s.id WHEN NOT MATCHED THEN INSERT (id, fencing_token) VALUES (s.id, DEFAULT)',
    ]) {
      expect(rewriter.rewriteParse(sql)).toBeNull()
    }
    for (const sql of [
      "INSERT INTO invoices (id, fencing_token) VALUES (1, DEFAULT), (2, '7')",
      'INSERT INTO invoices (id, fencing_token) SELECT 1, 7',
      'INSERT INTO invoices (id) VALUES (1) ON CONFLICT (id) DO UPDATE SET fencing_token = excluded.fencing_token + 1',
      'MERGE INTO invoices i USING src s ON i.id = s.id WHEN NOT MATCHED THEN INSERT (id, fencing_token) VALUES (s.id, 7)',
      'MERGE INTO invoices i USING src s ON i.id = s.id WHEN MATCHED THEN UPDATE SET fencing_token = 7',
      'UPDATE invoices SET (status, fencing_token) = ($1, $2)',
    ]) {
      expect(rewriter.rewriteQuery(sql)).toMatch(refusedFenceWrite)
    }
  })

  test('quoted, schema-qualified and configured columns follow PostgreSQL name rules', () => {
    expect(rewriter.rewriteQuery('UPDATE billing."Ledger" SET "Fence" = 1')).toMatch(
      refusedFenceWrite,
    )
    expect(rewriter.rewriteQuery('UPDATE "Ledger" SET "Fence" = 1')).toMatch(refusedFenceWrite)
    expect(rewriter.rewriteQuery('UPDATE "Ledger" SET fence = 1')).toBeNull()
    expect(rewriter.rewriteQuery('UPDATE INVOICES SET fencing_token = 1')).toMatch(
      refusedFenceWrite,
    )
    expect(rewriter.rewriteQuery('UPDATE U&"\\0069nvoices" SET fencing_token = 1')).toMatch(
      refusedFenceWrite,
    )
    expect(rewriter.rewriteQuery('UPDATE "Invoices" SET fencing_token = 1')).toBeNull()
  })

  test('refusals become a statement that raises upstream and keeps the parameters', () => {
    expect(rewriter.rewriteQuery('TRUNCATE invoices')).toMatch(
      /^SELECT pgfence\.refuse\('PF501', 'TRUNCATE/,
    )
    expect(
      rewriter.rewriteParse('INSERT INTO invoices (fencing_token, id) VALUES ($1, $2)'),
    ).toMatch(/^SELECT pgfence\.refuse\('PF501', .*\) FROM \(SELECT \$1, \$2\) AS p$/)
    expect(rewriter.rewriteQuery('UPDATE invoices SET')).toMatch(
      /pgfence\.refuse\('PF501', 'statement on a fenced table could not be parsed'/,
    )
  })

  test('a comment token in PREPARE is refused; on EXECUTE it marks the statement', () => {
    expect(
      rewriter.rewriteQuery("PREPARE p AS UPDATE invoices SET a = 1 /*fencing_token='5'*/"),
    ).toMatch(
      // Named after the table it writes, as every rejection is counted by table.
      /SELECT pgfence\.refuse\('PF501', 'a fencing token comment in PREPARE.*, '"invoices"', 'fencing_token'\)$/,
    )
    expect(rewriter.rewriteQuery('PREPARE p AS UPDATE invoices SET a = 1')).toBeNull()
    expect(rewriter.rewriteQuery("EXECUTE p /*fencing_token='5'*/")).toBe(
      "/*pgfence:token='5'*/ EXECUTE p /*fencing_token='5'*/",
    )
  })

  test('parameter numbering is kept', () => {
    expect(
      rewriter.rewriteParse('UPDATE invoices SET status = $2 WHERE id = $1 /* fencing_token=5 */'),
    ).toBe(
      `/*pgfence:token='5'*/ UPDATE invoices SET "fencing_token" = '5', status = $2 WHERE id = $1 /* fencing_token=5 */`,
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
    expect(second).toBe(` UPDATE invoices SET "fencing_token" = '7', a = 1 /* fencing_token=7 */`)
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
    // The refusal names the first fenced table written, where there is one.
    expect(
      rewriter.rewriteQuery('SELECT 1 /* fencing_token=7 */; DELETE FROM invoices WHERE a = 2'),
    ).toMatch(/, '"invoices"', 'fencing_token'\)$/)
    expect(
      rewriter.rewriteQuery('SELECT 1 /* fencing_token=7 */; SELECT 2 /* fencing_token=8 */'),
    ).toMatch(/, NULL, NULL\)$/)
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
    expect(out).toBe(`/*pgfence:token='9'*/ UPDATE invoices SET "fencing_token" = '9', a = 1`)
    // A statement that only gets the marker keeps its comments.
    expect(rewriter.rewriteQuery("/*fencing_token='9',route='x'*/ DELETE FROM invoices")).toBe(
      `/*pgfence:token='9'*/ /*fencing_token='9',route='x'*/ DELETE FROM invoices`,
    )
  })
})

describe('cache', () => {
  test('a valid and an invalid comment token do not share a rewrite', () => {
    const shape = (token: string) =>
      rewriter.rewriteQuery(
        `UPDATE invoices SET status = 'A' WHERE id = 17 -- fencing_token=${token}`,
      )
    expect(shape('5')).toMatch(/^\/\*pgfence:token='5'\*\/ UPDATE/)
    expect(shape('5x')).toMatch(/^\/\*pgfence:token='-'\*\/ UPDATE/)
    expect(shape('9223372036854775808')).toMatch(/^\/\*pgfence:token='-'\*\/ UPDATE/)
    expect(shape('9223372036854775807')).toMatch(/^\/\*pgfence:token='9223372036854775807'\*\//)
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
    expect(a).toMatch(/^\/\*pgfence:token='5'\*\/ /)
    expect(b).toContain("status = 'it''s'")
    expect(b).toContain('id = 18')
    expect(b).toMatch(/^\/\*pgfence:token='6'\*\/ /)
  })

  test('a literal a placeholder cannot stand for falls back to the exact text', () => {
    const shape = (literal: string) =>
      rewriter.rewriteQuery(
        `UPDATE invoices SET due = due + interval '${literal}' WHERE id = 1 -- fencing_token=5`,
      )
    const a = shape('1 day')
    const b = shape('2 days')
    expect(a).toContain("'1 day'")
    expect(b).toContain("'2 days'")
    const parses = rewriter.parses
    expect(shape('1 day')).toBe(a)
    expect(rewriter.parses).toBe(parses)
  })

  test('a statement that only gets the marker has a template for the native relay', () => {
    const template = rewriter.templateForQuery('DELETE FROM invoices WHERE id = $1 /*@v*/')!
    expect(fillTemplate(template, ['17', "'5'"])).toBe(
      "/*pgfence:token='5'*/ DELETE FROM invoices WHERE id = 17  ",
    )
  })

  test('an UPDATE with a comment token sets the fence column to it, in its template too', async () => {
    const template = rewriter.templateForQuery(
      'UPDATE invoices SET (status, a) = ($1, $2) WHERE id = $3 /*@v*/',
    )!
    expect(fillTemplate(template, ["'A'", '1', '17', "'5'"])).toBe(
      `/*pgfence:token='5'*/ UPDATE invoices SET "fencing_token" = '5', (status, a) = ('A', 1) WHERE id = 17  `,
    )
    // An invalid token is the trigger's to refuse (PF400): the column is left alone.
    expect(rewriter.rewriteQuery("UPDATE invoices SET a = 1 /*fencing_token='x'*/")).toBe(
      "/*pgfence:token='-'*/ UPDATE invoices SET a = 1 /*fencing_token='x'*/",
    )
    // Quoted names, and a table with rejectUnissuedTokens, whose rows all take the full check.
    expect(rewriter.rewriteParse(`UPDATE billing."Ledger" SET a = 1 -- fencing_token=3`)).toBe(
      `/*pgfence:token='3'*/ UPDATE billing."Ledger" SET "Fence" = '3', a = 1 -- fencing_token=3`,
    )
    const unissued = await createRewriter({ ...fencing, rejectUnissuedTokens: true })
    expect(unissued.rewriteQuery("UPDATE invoices SET a = 1 /*fencing_token='3'*/")).toBe(
      "/*pgfence:token='3'*/ UPDATE invoices SET a = 1 /*fencing_token='3'*/",
    )
  })

  test('Parse texts are cached by exact text', () => {
    const sql = 'UPDATE invoices SET status = $1 WHERE id = $2 -- fencing_token=5'
    const first = rewriter.rewriteParse(sql)
    expect(rewriter.rewriteParse(sql)).toBe(first)
    expect(rewriter.parses).toBe(1)
  })
})

describe('a fenced table without its fence trigger where the rewrite is used', () => {
  let own: FencingRewriter
  beforeEach(async () => {
    own = await createRewriter(fencing, new Set([1]))
  })

  test('its writes get the compare-and-raise; a triggered table keeps only its refusals', () => {
    const update = own.rewriteQuery("UPDATE invoices SET status = 'x' WHERE id = 1")
    expect(update).toContain('fencing_token = pgfence.advance_token(invoices.fencing_token, NULL,')
    const ledger = 'UPDATE billing."Ledger" SET a = 1'
    expect(own.rewriteQuery(ledger)).toBeNull()
    const remove = own.rewriteQuery('DELETE FROM invoices i WHERE id = 1')
    expect(remove).toMatch(
      /WHERE id = 1 AND CASE WHEN id = 1 THEN \(pgfence\.advance_token\(i\.fencing_token/,
    )
  })

  test('an insert gets the token in the fence column, and needs its column list', () => {
    const insert = own.rewriteParse('INSERT INTO invoices (id, fencing_token) VALUES ($1, DEFAULT)')
    expect(insert).toMatch(
      /^INSERT INTO invoices \(id, fencing_token\) VALUES \(\$1, COALESCE\(pgfence\.token\(/,
    )
    expect(own.rewriteQuery('INSERT INTO invoices VALUES (1)')).toContain("'PF501'")
    expect(rewriter.rewriteQuery('INSERT INTO invoices VALUES (1)')).toBeNull()
  })

  test('a comment token is read in the statement, and still marked for the triggers', () => {
    const stale = own.rewriteQuery("/*fencing_token='7'*/ UPDATE invoices SET status = 'x'")
    expect(stale).toMatch(
      /^\/\*pgfence:token='7'\*\/ .*pgfence\.advance_token\(invoices\.fencing_token, '7',/,
    )
  })
})

describe('a session that may be under pgfence.maintenance', () => {
  test('its fence column writes to a triggered table pass, for the trigger to decide', () => {
    const maintenance = rewriter.underMaintenance
    for (const sql of [
      'UPDATE invoices SET fencing_token = 0 WHERE id = 99',
      'INSERT INTO invoices (id, fencing_token) VALUES (1, 7)',
      'INSERT INTO invoices (id) VALUES (1) ON CONFLICT (id) DO UPDATE SET fencing_token = 7',
      'MERGE INTO invoices i USING src s ON i.id = s.id WHEN MATCHED THEN UPDATE SET fencing_token = 7',
    ]) {
      expect(maintenance.rewriteQuery(sql)).toBeNull()
      expect(maintenance.rewriteParse(sql)).toBeNull()
      // The same text in another session, with its own cache entry: still refused.
      expect(rewriter.rewriteQuery(sql)).toMatch(refusedFenceWrite)
    }
    // A comment token marks the statement; the column keeps the value the statement writes.
    expect(
      maintenance.rewriteQuery("UPDATE invoices SET fencing_token = 0 /*fencing_token='7'*/"),
    ).toBe("/*pgfence:token='7'*/ UPDATE invoices SET fencing_token = 0 /*fencing_token='7'*/")
    expect(maintenance.rewriteQuery('TRUNCATE invoices')).toMatch(/'PF501', 'TRUNCATE/)
    expect(maintenance.underMaintenance).toBe(maintenance)
  })

  test('a table without its fence trigger keeps the refusal: nothing would check the role', async () => {
    const own = (await createRewriter(fencing, new Set([1]))).underMaintenance
    expect(own.rewriteQuery('UPDATE invoices SET fencing_token = 0')).toMatch(refusedFenceWrite)
    expect(own.rewriteQuery('UPDATE billing."Ledger" SET "Fence" = 0')).toBeNull()
  })
})
