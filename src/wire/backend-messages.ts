/** Encoders for the few server messages the admin console sends itself (text columns only). */

const TEXT_OID = 25

function message(type: string, body: Buffer): Buffer {
  const header = Buffer.allocUnsafe(5)
  header[0] = type.charCodeAt(0)
  header.writeUInt32BE(body.length + 4, 1)
  return Buffer.concat([header, body])
}

const cstring = (text: string) => Buffer.from(`${text}\0`, 'utf8')

function int16(n: number): Buffer {
  const bytes = Buffer.allocUnsafe(2)
  bytes.writeInt16BE(n)
  return bytes
}

function int32(n: number): Buffer {
  const bytes = Buffer.allocUnsafe(4)
  bytes.writeInt32BE(n)
  return bytes
}

export const authenticationOk = (): Buffer => message('R', int32(0))

export const parameterStatus = (name: string, value: string): Buffer =>
  message('S', Buffer.concat([cstring(name), cstring(value)]))

export const backendKeyData = (processId: number, secretKey: number): Buffer =>
  message('K', Buffer.concat([int32(processId), int32(secretKey)]))

export const readyForQuery = (status = 'I'): Buffer => message('Z', Buffer.from(status, 'latin1'))

export const emptyQueryResponse = (): Buffer => message('I', Buffer.alloc(0))

export const commandComplete = (tag: string): Buffer => message('C', cstring(tag))

/** RowDescription of text columns. */
export function rowDescription(columns: readonly string[]): Buffer {
  const fields = columns.map((name) =>
    Buffer.concat([
      cstring(name),
      int32(0),
      int16(0),
      int32(TEXT_OID),
      int16(-1),
      int32(-1),
      int16(0),
    ]),
  )
  return message('T', Buffer.concat([int16(columns.length), ...fields]))
}

/** DataRow in text format; null is SQL NULL. */
export function dataRow(values: readonly (string | null)[]): Buffer {
  const cells = values.map((value) => {
    if (value === null) return int32(-1)
    const bytes = Buffer.from(value, 'utf8')
    return Buffer.concat([int32(bytes.length), bytes])
  })
  return message('D', Buffer.concat([int16(values.length), ...cells]))
}
