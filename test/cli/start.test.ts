import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { afterAll, beforeAll, expect, inject, test } from 'vitest'
import { stringify } from 'yaml'
import { runCommand } from '../e2e/support/commands.js'

let dir: string

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'pgfence-start-'))
})

afterAll(() => {
  if (dir) rmSync(dir, { recursive: true, force: true })
})

test('start without --config is refused with a word on why, before it listens', async () => {
  const { code, stdout, stderr } = await runCommand(process.execPath, [inject('cliPath'), 'start'])
  expect(code).toBe(2)
  expect(stdout).toBe('')
  expect(stderr).toContain('usage: pgfence start --config FILE')
  expect(stderr).toContain('without a config no table is fenced')
})

/** The log records `pgfence start` writes up to its 'listening' line; then it is stopped. */
async function startupLog(fencing: object): Promise<{ msg: string; level: number }[]> {
  const configFile = join(dir, `${Object.keys(fencing).join('-') || 'empty'}.yaml`)
  writeFileSync(configFile, stringify({ listen: { host: '127.0.0.1', port: 0 }, fencing }))
  const child = spawn(process.execPath, [inject('cliPath'), 'start', '--config', configFile], {
    stdio: ['ignore', 'pipe', 'inherit'],
  })
  const records: { msg: string; level: number }[] = []
  for await (const line of createInterface({ input: child.stdout! })) {
    records.push(JSON.parse(line) as { msg: string; level: number })
    if (records.at(-1)!.msg === 'pgfence listening') break
  }
  const exited = once(child, 'exit')
  child.kill('SIGTERM')
  expect((await exited)[0]).toBe(0)
  return records
}

test('a config that fences nothing logs one warning at start; one that fences does not', async () => {
  const warning = 'the config fences no table: every statement passes through unchanged'
  const empty = await startupLog({})
  expect(empty.filter((r) => r.msg === warning)).toEqual([
    expect.objectContaining({ level: 40 }), // pino's warn
  ])
  expect(empty.at(-1)!.msg).toBe('pgfence listening')
  const fenced = await startupLog({ tables: [{ name: 'invoices' }] })
  expect(fenced.at(-1)!.msg).toBe('pgfence listening')
  expect(fenced.map((r) => r.msg)).not.toContain(warning)
})
