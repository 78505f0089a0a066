import { execFile } from 'node:child_process'
import { promisify } from 'node:util'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { RoundResult } from '../../src/cli/demo.js'
import { buildScripts } from './support/build-scripts.js'
import { redisUrl } from './support/lease-fixtures.js'

const run = promisify(execFile)
let scripts: Awaited<ReturnType<typeof buildScripts>>

beforeAll(async () => {
  scripts = await buildScripts({
    demo: 'src/cli/demo.ts',
    'demo-worker': 'src/cli/demo-worker.ts',
  })
})

afterAll(() => scripts?.remove())

describe('pgfence demo --json', () => {
  it('shows the naive lock and the lease alone corrupting invoice 99, and pgfence refusing the late write', async () => {
    const entry = `import(${JSON.stringify(scripts.path('demo'))}).then((demo) => demo.run(process.argv.slice(1))).then((code) => process.exit(code))`
    const startedAt = Date.now()
    const { stdout } = await run(
      process.execPath,
      ['--input-type=module', '-e', entry, '--', '--json', '--redis-url', redisUrl()],
      { timeout: 60_000 },
    )
    expect(Date.now() - startedAt).toBeLessThan(30_000)
    const { rounds } = JSON.parse(stdout) as { rounds: RoundResult[] }
    expect(rounds).toEqual([
      { name: 'naive', finalValue: 'A', corrupted: true, staleWriteCode: null },
      { name: 'lease', finalValue: 'A', corrupted: true, staleWriteCode: null },
      { name: 'fenced', finalValue: 'B', corrupted: false, staleWriteCode: 'PF409' },
    ])
  })
})
