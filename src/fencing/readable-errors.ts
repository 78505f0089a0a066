import {
  decodeErrorResponse,
  encodeErrorResponse,
  type ErrorField,
} from '../wire/error-response.js'
import { Backend, ErrorFieldType as Field } from '../wire/protocol.js'
import { directTokenHint, proxyTokenHint } from '../rewrite/token-refusals.js'

/** A CONTEXT entry of pgfence's own PL/pgSQL, and the statement text one of them ran. */
const OWN_FUNCTION = 'PL/pgSQL function pgfence.'
const OWN_STATEMENT = 'SQL statement "SELECT pgfence.'
const ANY_FUNCTION = 'PL/pgSQL function '

/** What the proxy's own words for a PF428 name. */
export type TokenWords = { setting: string; commentKey: string }

/**
 * A PF error as a person should read it: message, DETAIL, HINT and the table fields, without
 * the CONTEXT lines of pgfence's own helpers (a user's functions stay); a PF428 with the fence
 * trigger's HINT, which must work on any connection, gets the proxy's, which also names the
 * comment token. Returns the message to send instead, or undefined to send it as it is.
 */
export function readableError(message: Buffer, fencing: TokenWords): Buffer | undefined {
  if (message[0] !== Backend.ErrorResponse) return undefined
  // latin1: byte for byte, whatever the client_encoding; the markers are ASCII.
  const fields = decodeErrorResponse(message, 'latin1')
  const code = fields.find(([key]) => key === Field.Code)?.[1]
  if (!code?.startsWith('PF')) return undefined
  const directHint = directTokenHint(fencing.setting)
  const hint =
    code === 'PF428'
      ? fields.findIndex(([key, value]) => key === Field.Hint && value === directHint)
      : -1
  if (hint >= 0) fields[hint] = [Field.Hint, proxyTokenHint(fencing)]
  return (
    withContext(fields, withoutOwnContext) ??
    (hint >= 0 ? encodeErrorResponse(fields, 'latin1') : undefined)
  )
}

/**
 * The ErrorResponse of `fields` (decoded as latin1) with its CONTEXT passed through `clean`,
 * and dropped when that leaves nothing; undefined when the CONTEXT stays as it is.
 */
export function withContext(
  fields: ErrorField[],
  clean: (context: string) => string,
): Buffer | undefined {
  const at = fields.findIndex(([key]) => key === Field.Where)
  if (at < 0) return undefined
  const context = clean(fields[at]![1])
  if (context === fields[at]![1]) return undefined
  if (context === '') fields.splice(at, 1)
  else fields[at] = [Field.Where, context]
  return encodeErrorResponse(fields, 'latin1')
}

/**
 * Drops pgfence's function lines, and each `SQL statement "SELECT pgfence.…"` entry up to the
 * next function line (the statement text may span lines).
 */
export function withoutOwnContext(context: string): string {
  const kept: string[] = []
  let inOwnStatement = false
  for (const line of context.split('\n')) {
    if (line.startsWith(ANY_FUNCTION)) inOwnStatement = false
    if (line.startsWith(OWN_STATEMENT)) inOwnStatement = true
    if (!inOwnStatement && !line.startsWith(OWN_FUNCTION)) kept.push(line)
  }
  return kept.join('\n')
}
