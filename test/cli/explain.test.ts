import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, inject, test } from 'vitest'
import { runCommand } from '../e2e/support/commands.js'

let dir: string
let configFile: string

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'pgfence-explain-'))
  configFile = join(dir, 'pgfence.yaml')
  writeFileSync(
    configFile,
    [
      'fencing:',
      '  tables:',
      '    - name: invoices',
      '    - name: audit_log',
      '      requireToken: false',
      '  resources:',
      '    - tables: [payouts]',
      '      resource: nightly-billing',
      '',
    ].join('\n'),
  )
})

afterAll(() => {
  if (dir) rmSync(dir, { recursive: true, force: true })
})

/** `pgfence explain` as a user runs it: the built CLI in its own process. */
const explain = (...args: string[]) =>
  runCommand(process.execPath, [inject('cliPath'), 'explain', '--config', configFile, ...args])

const update = "UPDATE invoices SET status = 'PAID' WHERE id = 99"

describe('pgfence explain tells what the proxy does with the token it would have', () => {
  test('no token: PF428 with the proxy hint, exit 1', async () => {
    const { code, stdout } = await explain(update)
    expect(stdout).toBe(
      'refused: PF428 fencing token required\n' +
        '  DETAIL: no fencing token was presented for a write to table "invoices"\n' +
        '  HINT: SET app.fencing_token = N, or put /* fencing_token=N */ in the statement, with N the token of the lock you hold\n',
    )
    expect(code).toBe(1)
  })

  test('--token 5: the statement as sent, checked with token 5, exit 0', async () => {
    const { code, stdout } = await explain('--token', '5', update)
    expect(stdout).toBe(
      'passes through unchanged\n' +
        'fenced: "invoices", with token 5 (session); PF409 if a row or resource holds a higher one\n',
    )
    expect(code).toBe(0)
    // A resource member's write is rewritten: its gate reads the session token.
    const member = await explain('--token', '5', 'UPDATE payouts SET amount = 1 WHERE id = 2')
    expect(member.stdout).toMatch(
      /^upstream: UPDATE payouts SET amount = 1 WHERE \(SELECT pgfence\.enter_resource\('nightly-billing', pgfence\.token\(NULL, 'app\.fencing_token', true/,
    )
    expect(member.code).toBe(0)
  })

  test('a comment token counts as in the proxy, and overrides --token', async () => {
    for (const args of [[], ['--token', 'not-a-token']]) {
      const { code, stdout } = await explain(...args, `/*fencing_token='7'*/ ${update}`)
      expect(stdout).toMatch(
        /^upstream: \/\*pgfence:token='7'\*\/ .*UPDATE invoices SET "fencing_token" = '7'/,
      )
      expect(stdout).toContain(`fenced: "invoices", with token '7' (comment)`)
      expect(code).toBe(0)
    }
  })

  test('an invalid token is PF400, exit 1', async () => {
    const session = await explain('--token', '12x', update)
    expect(session.stdout).toMatch(
      /^refused: PF400 invalid fencing token\n {2}DETAIL: fencing token '12x' is not an integer/,
    )
    expect(session.code).toBe(1)
    const comment = await explain(`${update} /* fencing_token=-1 */`)
    expect(comment.stdout).toContain(
      "DETAIL: fencing token in the statement's comment is not an integer",
    )
    expect(comment.code).toBe(1)
  })

  test('unfenced tables, reads and tables that require no token pass, exit 0', async () => {
    for (const sql of [
      "UPDATE other SET status = 'x'",
      'SELECT * FROM invoices',
      "INSERT INTO audit_log (line) VALUES ('x')",
    ]) {
      const { code, stdout } = await explain(sql)
      expect(stdout).toBe('passes through unchanged\n')
      expect(code).toBe(0)
    }
    // The token matters only to fenced writes, as upstream.
    expect((await explain('--token', 'x', "UPDATE other SET status = 'x'")).code).toBe(0)
  })

  test('other refusals exit 1; bad arguments 2', async () => {
    const truncate = await explain('TRUNCATE invoices')
    expect(truncate.stdout).toMatch(/^refused: PF501 TRUNCATE is not supported/)
    expect(truncate.code).toBe(1)
    // The first fenced write's table names a refusal of mixed tokens.
    const mixed = await explain(`/*fencing_token=7*/ ${update}; SELECT 1`)
    expect(mixed.stdout).toMatch(/^refused: PF501 statements with different fencing tokens/)
    expect(mixed.code).toBe(1)
    // A transaction pool refuses what would outlive the transaction, before any rewrite.
    const pooledConfig = join(dir, 'pooled.yaml')
    writeFileSync(
      pooledConfig,
      'pool: { mode: transaction }\nauth: { file: userlist.txt }\nfencing: { tables: [{ name: invoices }] }\n',
    )
    const listen = await runCommand(process.execPath, [
      inject('cliPath'),
      'explain',
      '--config',
      pooledConfig,
      'LISTEN invoices_paid',
    ])
    expect(listen.stdout).toMatch(
      /^refused: 0A000 LISTEN not supported in transaction pooling mode\n {2}DETAIL: /,
    )
    expect(listen.code).toBe(1)
    expect((await explain('LISTEN invoices_paid')).code).toBe(0)
    expect((await explain()).code).toBe(2)
    expect((await explain('--token')).code).toBe(2)
  })
})
