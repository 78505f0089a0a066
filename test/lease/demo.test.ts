import { execFile } from 'node:child_process'
import { promisify } from 'node:util'
import { describe, expect, inject, it } from 'vitest'
import type { RoundResult } from '../../src/cli/demo.js'
import { redisUrl } from './support/lease-fixtures.js'

const run = promisify(execFile)

describe('pgfence demo --json', () => {
  it('shows the naive lock and the lease alone corrupting invoice 99, and pgfence refusing the late writes', async () => {
    const startedAt = Date.now()
    const { stdout } = await run(
      process.execPath,
      [inject('cliPath'), 'demo', '--json', '--redis-url', redisUrl()],
      { timeout: 60_000 },
    )
    expect(Date.now() - startedAt).toBeLessThan(30_000)
    const { rounds } = JSON.parse(stdout) as { rounds: RoundResult[] }
    expect(rounds).toEqual([
      { name: 'naive', finalValue: 'A', corrupted: true, staleWriteCode: null },
      { name: 'lease', finalValue: 'A', corrupted: true, staleWriteCode: null },
      { name: 'fenced', finalValue: 'B', corrupted: false, staleWriteCode: 'PF409' },
      {
        name: 'split-brain',
        finalValue: 'B (ledger: B)',
        corrupted: false,
        staleWriteCode: 'PF409',
      },
    ])
  })
})
