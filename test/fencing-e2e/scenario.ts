import { expect } from 'vitest'
import type { FencedStack, Outcome } from './support.js'

/** One write of the GC-pause story to invoice 99: an UPDATE to `status`, or a DELETE. */
export type Write = { kind: 'update'; status: string } | { kind: 'delete' }

/**
 * How one client presents a token (null: none) and runs a write, as its own protocol does.
 * The token is presented in the same session, so it stays in force for later writes.
 */
export type Attempt = (token: string | null, write: Write) => Promise<Outcome>

const rejected = (code: string, incoming: string, committed: string) => ({
  code,
  detail: expect.stringMatching(new RegExp(`\\b${incoming}\\b.*\\b${committed}\\b`)),
  hint: expect.stringMatching(/\S/),
  schema: 'public',
  table: 'invoices',
  column: 'fencing_token',
})

/**
 * The product story through one client: 101 and 102 commit, a late 101 is PF409 and 102's
 * write stays, 102 again commits, no token is PF428, a stale DELETE is PF409 and the row stays.
 */
export async function runGcPauseScenario(stack: FencedStack, attempt: Attempt): Promise<void> {
  await stack.seed(99)
  expect(await attempt('101', { kind: 'update', status: 'W1' })).toEqual({
    code: 'ok',
    rowCount: 1,
  })
  expect(await stack.invoice(99)).toEqual({ status: 'W1', fencing_token: '101' })
  expect(await attempt('102', { kind: 'update', status: 'W2' })).toEqual({
    code: 'ok',
    rowCount: 1,
  })
  expect(await stack.invoice(99)).toEqual({ status: 'W2', fencing_token: '102' })
  expect(await attempt('101', { kind: 'update', status: 'LATE' })).toEqual(
    rejected('PF409', '101', '102'),
  )
  expect(await stack.invoice(99)).toEqual({ status: 'W2', fencing_token: '102' })
  expect(await attempt('102', { kind: 'update', status: 'W2b' })).toEqual({
    code: 'ok',
    rowCount: 1,
  })
  expect(await stack.invoice(99)).toEqual({ status: 'W2b', fencing_token: '102' })
  expect(await attempt(null, { kind: 'update', status: 'NONE' })).toMatchObject({
    code: 'PF428',
    table: 'invoices',
    column: 'fencing_token',
  })
  expect(await attempt('101', { kind: 'delete' })).toEqual(rejected('PF409', '101', '102'))
  expect(await stack.invoice(99)).toEqual({ status: 'W2b', fencing_token: '102' })
}

/** The write as a statement with parameters. */
export function parameterised(write: Write): { text: string; values: unknown[] } {
  return write.kind === 'update'
    ? { text: 'UPDATE invoices SET status = $1 WHERE id = $2', values: [write.status, 99] }
    : { text: 'DELETE FROM invoices WHERE id = $1', values: [99] }
}

/** The write as one literal statement, for the simple protocol. */
export function literal(write: Write): string {
  return write.kind === 'update'
    ? `UPDATE invoices SET status = '${write.status}' WHERE id = 99`
    : 'DELETE FROM invoices WHERE id = 99'
}

/** The statement that presents `token` as the session token (or takes it away). */
export const presentToken = (token: string | null): string =>
  token === null ? 'RESET app.fencing_token' : `SET app.fencing_token = ${token}`
