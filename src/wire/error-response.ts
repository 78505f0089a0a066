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
    const fields: [string, string | undefined][] = [
      ['S', this.severity],
      ['V', this.severity],
      ['C', this.code],
      ['M', this.message],
      ['D', this.detail],
      ['H', this.hint],
    ]
    const parts: Buffer[] = []
    for (const [key, value] of fields) {
      if (value !== undefined) parts.push(Buffer.from(`${key}${value}\0`, 'utf8'))
    }
    parts.push(Buffer.from([0]))
    const body = Buffer.concat(parts)
    const header = Buffer.allocUnsafe(5)
    header[0] = 0x45
    header.writeUInt32BE(body.length + 4, 1)
    return Buffer.concat([header, body])
  }
}

export interface ErrorFields {
  severity?: string
  code?: string
  message?: string
  detail?: string
  schema?: string
  table?: string
  column?: string
}

const FIELD_NAMES: Record<string, keyof ErrorFields> = {
  V: 'severity',
  C: 'code',
  M: 'message',
  D: 'detail',
  s: 'schema',
  t: 'table',
  c: 'column',
}

/** Reads the fields of a complete ErrorResponse message (header included). */
export function decodeErrorFields(message: Buffer): ErrorFields {
  const fields: ErrorFields = {}
  let pos = 5
  while (pos < message.length && message[pos] !== 0) {
    const key = String.fromCharCode(message[pos]!)
    const end = message.indexOf(0, pos + 1)
    if (end < 0) break
    const name = FIELD_NAMES[key]
    if (name) fields[name] = message.toString('utf8', pos + 1, end)
    pos = end + 1
  }
  return fields
}
