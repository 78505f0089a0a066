import { afterAll, beforeAll, expect, test } from 'vitest'
import { pgBin, runCommand } from '../e2e/support/commands.js'
import { createTestDatabase } from '../support/database.js'
import { literal, presentToken, runGcPauseScenario, type Write } from './scenario.js'
import { startFencedStack, type FencedStack, type Outcome } from './support.js'

let stack: FencedStack

beforeAll(async () => {
  stack = await startFencedStack(await createTestDatabase('fencing_e2e_psql'))
})

afterAll(async () => {
  await stack?.close()
})

/** Labels of psql's verbose error report, by the error field each one shows. */
const errorLabels = {
  detail: 'DETAIL',
  hint: 'HINT',
  schema: 'SCHEMA NAME',
  table: 'TABLE NAME',
  column: 'COLUMN NAME',
} as const

/** Reads the outcome from psql's command tag (stdout) or verbose error report (stderr). */
function psqlOutcome(code: number | null, stdout: string, stderr: string): Outcome {
  if (code === 0) return { code: 'ok', rowCount: Number(/(\d+)\s*$/.exec(stdout)?.[1]) }
  const sqlstate = /^ERROR: {2}(\w{5}):/m.exec(stderr)?.[1] ?? `exit ${code}: ${stderr}`
  const fields: Record<string, string> = {}
  for (const [field, label] of Object.entries(errorLabels)) {
    const value = new RegExp(`^${label}: {2}(.*)$`, 'm').exec(stderr)?.[1]
    if (value !== undefined) fields[field] = value
  }
  return { code: sqlstate, ...fields }
}

/** A new psql session that presents the token and runs the write, stopping at the first error. */
async function psqlAttempt(token: string | null, write: Write): Promise<Outcome> {
  const script = ['\\set VERBOSITY verbose', `${presentToken(token)};`, `${literal(write)};`, '']
  const { code, stdout, stderr } = await runCommand(
    pgBin('psql'),
    ['--no-psqlrc', '-X', '-At', '-v', 'ON_ERROR_STOP=1', '-d', stack.url],
    { input: script.join('\n') },
  )
  return psqlOutcome(code, stdout, stderr)
}

test('the GC-pause story with psql, error fields in its verbose report', async () => {
  await runGcPauseScenario(stack, psqlAttempt)
})

test('a script stops at PF409 and its transaction lands nothing', async () => {
  await stack.seed(99, '102')
  const script = [
    '\\set VERBOSITY verbose',
    'BEGIN;',
    'SET LOCAL app.fencing_token = 101;',
    "INSERT INTO invoices (id, status) VALUES (501, 'NEW');",
    literal({ kind: 'update', status: 'LATE' }) + ';',
    'COMMIT;',
    '',
  ]
  const { code, stderr } = await runCommand(
    pgBin('psql'),
    ['--no-psqlrc', '-X', '-At', '-v', 'ON_ERROR_STOP=1', '-d', stack.url],
    { input: script.join('\n') },
  )
  expect(code).toBe(3)
  expect(stderr).toMatch(/^ERROR: {2}PF409: stale fencing token$/m)
  expect(await stack.invoice(501)).toBeUndefined()
  expect(await stack.invoice(99)).toEqual({ status: 'PENDING', fencing_token: '102' })
})
