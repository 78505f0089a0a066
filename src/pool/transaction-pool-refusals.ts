import type { RefusedFeature } from './transaction-rules.js'
import { quoteLiteral } from '../rewrite/sql-text.js'
import { decodeErrorResponse, type ErrorFields } from '../wire/error-response.js'
import { withContext } from '../fencing/readable-errors.js'

/**
 * What each feature would leave on the server connection, and what to do instead: ASCII only,
 * since the refusal goes to PostgreSQL in the client's place, in whatever encoding it speaks.
 */
const REASONS: Record<RefusedFeature, { leaves: string; hint: string }> = {
  LISTEN: {
    leaves: 'the listener',
    hint: 'LISTEN through a session pool (pool.mode: session) or straight to PostgreSQL',
  },
  'session advisory locks': {
    leaves: 'the lock',
    hint: 'use pg_advisory_xact_lock or pg_try_advisory_xact_lock, released when the transaction ends',
  },
  'DECLARE ... WITH HOLD': {
    leaves: 'the cursor',
    hint: 'declare the cursor without WITH HOLD in a transaction block, and read it before the block ends',
  },
  'temporary tables kept between transactions': {
    leaves: 'the table',
    hint: 'create it with ON COMMIT DROP in a transaction block, and use it before the block ends',
  },
  'temporary views, sequences and functions': {
    leaves: 'the object',
    hint: 'create it in a schema of its own, or use a temporary table with ON COMMIT DROP in a transaction block',
  },
}

const message = (feature: RefusedFeature) => `${feature} not supported in transaction pooling mode`

/**
 * The CONTEXT the DO block below adds to its error, `PL/pgSQL function inline_code_block line 1
 * at RAISE` (in the server's lc_messages): one line that names the block.
 */
const OWN_CONTEXT = /^[^\n]*\binline_code_block\b[^\n]*$/

/** The 0A000 a refused feature gets (`pgfence explain` prints it too). */
export function transactionPoolRefusal(feature: RefusedFeature): {
  code: '0A000'
  message: string
  detail: string
  hint: string
} {
  const { leaves, hint } = REASONS[feature]
  const detail = `${leaves} would stay on the server connection, which other clients use once this transaction ends`
  return { code: '0A000', message: message(feature), detail, hint }
}

/**
 * The statement that takes a refused one's place: it fails in PostgreSQL with the refusal, at
 * the statement's place in the stream, so the transaction state stays right.
 */
export function refusalStatement(feature: RefusedFeature): string {
  const refusal = transactionPoolRefusal(feature)
  const fields = { MESSAGE: refusal.message, DETAIL: refusal.detail, HINT: refusal.hint }
  const using = Object.entries(fields).map(([name, text]) => `, ${name} = ${quoteLiteral(text)}`)
  return `DO $pgfence$BEGIN RAISE EXCEPTION USING ERRCODE = '${refusal.code}'${using.join('')}; END$pgfence$`
}

const MESSAGES = new Set((Object.keys(REASONS) as RefusedFeature[]).map(message))

/**
 * A refusal as the client should read it: message, DETAIL and HINT, without the CONTEXT line of
 * the DO block that raised it. Returns the message to send instead, or undefined for any other
 * error (a 0A000 of the client's own keeps its CONTEXT).
 */
export function readableRefusal(error: Buffer, fields: ErrorFields): Buffer | undefined {
  if (fields.code !== '0A000' || !MESSAGES.has(fields.message ?? '')) return undefined
  const all = decodeErrorResponse(error, 'latin1')
  return withContext(all, (context) => (OWN_CONTEXT.test(context) ? '' : context))
}
