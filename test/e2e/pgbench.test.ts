import { afterAll, beforeAll, describe, expect, test } from 'vitest'
import { createTestDatabase, type TestDatabase } from '../support/database.js'
import { startTestProxy, type TestProxy } from '../support/proxy.js'
import { pgBin, runCommand, type CommandResult } from './support/commands.js'

let db: TestDatabase
let proxy: TestProxy

beforeAll(async () => {
  db = await createTestDatabase('e2e_pgbench')
  proxy = await startTestProxy({}, db.url)
})

afterAll(async () => {
  await proxy?.close()
  await db?.drop()
})

const pgbench = (args: string[]): Promise<CommandResult> =>
  runCommand(pgBin('pgbench'), [...args, proxy.url()], { env: { PGCONNECT_TIMEOUT: '5' } })

function processedTransactions(output: string): number {
  const match = /number of transactions actually processed: (\d+)/.exec(output)
  if (!match) throw new Error(`no transaction count in pgbench output:\n${output}`)
  return Number(match[1])
}

describe('pgbench through the proxy', () => {
  test('-i initialises its tables', async () => {
    const result = await pgbench(['-i', '-s', '1', '-q'])
    expect(result.stderr).toContain('done in')
    expect(result.code).toBe(0)
  })

  describe.each(['simple', 'extended', 'prepared'])('-M %s', (mode) => {
    test.each([
      ['the default TPC-B script', []],
      ['the select-only script', ['-S']],
    ])('%s runs with 4 clients without errors', async (_name, script) => {
      const result = await pgbench([...script, '-M', mode, '-c', '4', '-j', '2', '-T', '2', '-n'])
      expect(result.stderr).not.toMatch(/error|abort/i)
      expect(result.code).toBe(0)
      expect(result.stdout).toMatch(/number of failed transactions: 0 /)
      expect(processedTransactions(result.stdout)).toBeGreaterThan(50)
    })
  })
})
