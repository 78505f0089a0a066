import { typedMessage } from './messages.js'
import { Backend, ErrorFieldType as Field } from './protocol.js'

/**
 * A PostgreSQL-shaped error that encodes itself as an ErrorResponse, for the few cases the
 * proxy must answer on its own (startup failures, limits, an unreachable upstream).
 */
export class PgError extends Error {
  constructor(
    readonly code: string,
    message: string,
    readonly severity: 'ERROR' | 'FATAL' = 'FATAL',
    readonly detail?: string,
    readonly hint?: string,
  ) {
    super(message)
    this.name = 'PgError'
  }

  encode(): Buffer {
    const fields: ErrorField[] = [
      [Field.Severity, this.severity],
      [Field.SeverityNonLocalized, this.severity],
      [Field.Code, this.code],
      [Field.Message, this.message],
    ]
    if (this.detail !== undefined) fields.push([Field.Detail, this.detail])
    if (this.hint !== undefined) fields.push([Field.Hint, this.hint])
    return encodeErrorResponse(fields)
  }
}

/** One field of an ErrorResponse: its type letter and its text. */
export type ErrorField = [type: string, value: string]

/**
 * Every field of a complete ErrorResponse (or NoticeResponse), in order. `latin1` reads the
 * bytes one to one, so that encodeErrorResponse with `latin1` gives them back whatever the
 * session's client_encoding.
 */
export function decodeErrorResponse(
  message: Buffer,
  encoding: BufferEncoding = 'utf8',
): ErrorField[] {
  const fields: ErrorField[] = []
  let pos = 5
  while (pos < message.length && message[pos] !== 0) {
    const end = message.indexOf(0, pos + 1)
    if (end < 0) break
    fields.push([String.fromCharCode(message[pos]!), message.toString(encoding, pos + 1, end)])
    pos = end + 1
  }
  return fields
}

/** An ErrorResponse (or a NoticeResponse) of these fields, in this order. */
export function encodeErrorResponse(
  fields: ErrorField[],
  encoding: BufferEncoding = 'utf8',
  type: Backend.ErrorResponse | Backend.NoticeResponse = Backend.ErrorResponse,
): Buffer {
  const body = Buffer.from(
    `${fields.map(([key, value]) => `${key}${value}\0`).join('')}\0`,
    encoding,
  )
  return typedMessage(type, body)
}

export interface ErrorFields {
  severity?: string
  code?: string
  message?: string
  detail?: string
  schema?: string
  table?: string
  column?: string
  /** The server function that raised it: never translated, unlike the texts. */
  routine?: string
}

const FIELD_NAMES: Record<string, keyof ErrorFields> = {
  [Field.SeverityNonLocalized]: 'severity',
  [Field.Code]: 'code',
  [Field.Message]: 'message',
  [Field.Detail]: 'detail',
  [Field.Schema]: 'schema',
  [Field.Table]: 'table',
  [Field.Column]: 'column',
  [Field.Routine]: 'routine',
}

/** Reads the fields of a complete ErrorResponse or NoticeResponse (header included). */
export function decodeErrorFields(message: Buffer): ErrorFields {
  const fields: ErrorFields = {}
  for (const [key, value] of decodeErrorResponse(message)) {
    const name = FIELD_NAMES[key]
    if (name) fields[name] = value
  }
  return fields
}
