import type { LevelLogger } from '../log.js'
import { decodeErrorFields, PgError, type ErrorFields } from '../wire/error-response.js'
import { decodeParameterStatus } from '../wire/parameter-status.js'
import { FENCING_CODES } from '../rewrite/refusal.js'
import { staleTokenDetail } from '../rewrite/refusal-texts.js'
import { escapeRegex } from '../rewrite/sql-text.js'
import { schemaMismatch } from '../schema/schema-version.js'
import { readableError, type TokenWords } from './readable-errors.js'

const isFencingCode = (code: string): boolean => (FENCING_CODES as readonly string[]).includes(code)

/** PF409's DETAIL up to its second token, which the log line reads both tokens from. */
const STALE_DETAIL = (() => {
  const [before, between] = staleTokenDetail('\0', '\0', '').split('\0') as [string, string]
  return new RegExp(`^${escapeRegex(before)}(\\d+)${escapeRegex(between)}(\\d+)`)
})()

/** Counts a fencing rejection (metrics), by SQLSTATE and `schema.table`. */
export type OnRejection = (code: string, table: string) => void

/**
 * pgfence lexes SQL as the server does with standard_conforming_strings on: with it off, `\'`
 * ends a plain literal for pgfence but not for the server, so a write could pass for part of
 * a literal and go through unfenced. A fencing session is refused instead.
 */
export function nonConformingStrings(value: string): PgError | null {
  if (value === 'on') return null
  return new PgError(
    '0A000',
    'pgfence requires standard_conforming_strings = on',
    'FATAL',
    `the server reports standard_conforming_strings = ${value}`,
    'leave standard_conforming_strings at its default (on) for sessions through pgfence',
  )
}

/** The refusal a server ParameterStatus calls for in a fencing session, if any. */
export function parameterRefusal(message: Buffer): PgError | null {
  const { name, value } = decodeParameterStatus(message)
  return name === 'standard_conforming_strings' ? nonConformingStrings(value) : null
}

/** The server function that waits for the synchronous standby: names are never translated. */
const SYNC_WAIT_ROUTINE = 'SyncRepWaitForLSN'
/** Its DETAIL when the wait is cancelled (English), for a server that sends no routine. */
const LOCAL_ONLY_DETAIL =
  'The transaction has already committed locally, but might not have been replicated to the standby.'

/**
 * A COMMIT (or a statement's implicit commit) whose wait for the synchronous standby was
 * cancelled (pg_cancel_backend, statement_timeout, pg_terminate_backend): PostgreSQL warns and
 * answers as if it committed, but the commit may be lost at a failover. The client gets 08007
 * in place of the WARNING (and of the CommandComplete after it: BackendScanner), never success;
 * FATAL when the backend terminates too (57P01: it sends nothing more). Read by the
 * non-localised severity (V) and routine (R), so it holds whatever lc_messages is.
 */
export function unknownCommit(notice: Buffer): PgError | null {
  const fields = decodeErrorFields(notice)
  const cancelled =
    fields.severity === 'WARNING' &&
    (fields.routine === undefined
      ? fields.detail === LOCAL_ONLY_DETAIL
      : fields.routine === SYNC_WAIT_ROUTINE)
  if (!cancelled) return null
  return new PgError(
    '08007',
    'transaction resolution unknown: the commit may not have reached the synchronous standby',
    fields.code === '57P01' ? 'FATAL' : 'ERROR',
    `the server committed the transaction locally, but its wait for the synchronous standby was cancelled (${fields.message ?? 'no message'}): a failover may lose it`,
    'check whether the transaction committed before retrying it',
  )
}

/**
 * What a fenced write meets in a database where `pgfence migrate` never ran, instead of the
 * server's "schema pgfence does not exist" (the check at login logs the database once).
 */
function notMigrated(): PgError {
  const { message, detail, hint } = schemaMismatch(null)!
  return new PgError('PF501', message, 'ERROR', detail, hint)
}

/**
 * A server ErrorResponse: a fencing rejection is counted, logged (info) and given back as
 * readableError words it (the replacement returned); a missing pgfence schema is said as
 * the migrate it needs; anything else passes as it is.
 */
export function onServerError(
  message: Buffer,
  fields: ErrorFields,
  logger: LevelLogger,
  onRejection: OnRejection,
  fencing: TokenWords,
): Buffer | undefined {
  // In the server's language: only its code and the schema's name are sure.
  if (fields.code === '3F000' && fields.message?.includes('pgfence')) return notMigrated().encode()
  if (!fields.code?.startsWith('PF')) return undefined
  // A user's own PF code is relayed as readable, but it is no fencing rejection.
  if (isFencingCode(fields.code)) {
    onRejection(fields.code, `${fields.schema ?? ''}.${fields.table ?? ''}`)
  }
  const tokens = STALE_DETAIL.exec(fields.detail ?? '')
  logger.info(
    {
      code: fields.code,
      schema: fields.schema,
      table: fields.table,
      incoming: tokens?.[1],
      committed: tokens?.[2],
      detail: fields.detail,
    },
    'fencing rejection',
  )
  return readableError(message, fencing)
}
