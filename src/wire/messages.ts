/** Encoders for the few messages pgfence writes itself when it speaks for a server or a client. */

const cstring = (text: string): Buffer => Buffer.from(`${text}\0`, 'utf8')

/** A typed message: type byte, length (counting itself), body. */
export function typedMessage(type: string, ...parts: Buffer[]): Buffer {
  const body = Buffer.concat(parts)
  const out = Buffer.allocUnsafe(5 + body.length)
  out[0] = type.charCodeAt(0)
  out.writeUInt32BE(4 + body.length, 1)
  body.copy(out, 5)
  return out
}

const int32 = (value: number): Buffer => {
  const out = Buffer.allocUnsafe(4)
  out.writeInt32BE(value)
  return out
}

export const AUTH_OK = 0
export const AUTH_CLEARTEXT = 3
export const AUTH_MD5 = 5
export const AUTH_SASL_CONTINUE = 11
export const AUTH_SASL_FINAL = 12

export const authentication = (code: number, data: Buffer = Buffer.alloc(0)): Buffer =>
  typedMessage('R', int32(code), data)

export const authenticationSasl = (mechanisms: string[]): Buffer =>
  typedMessage('R', int32(10), ...mechanisms.map(cstring), Buffer.from([0]))

export const parameterStatus = (name: string, value: string): Buffer =>
  typedMessage('S', cstring(name), cstring(value))

export const backendKeyData = (key: Buffer): Buffer => typedMessage('K', key)

export const readyForQuery = (status: string): Buffer => typedMessage('Z', Buffer.from(status))

export const query = (text: string): Buffer => typedMessage('Q', cstring(text))

export const passwordMessage = (password: string): Buffer => typedMessage('p', cstring(password))

export const saslInitialResponse = (mechanism: string, data: string): Buffer => {
  const bytes = Buffer.from(data, 'utf8')
  return typedMessage('p', cstring(mechanism), int32(bytes.length), bytes)
}

export const saslResponse = (data: string): Buffer => typedMessage('p', Buffer.from(data, 'utf8'))

/** A StartupMessage (protocol 3.0) with these parameters. */
export function startupMessage(params: Iterable<[string, string]>): Buffer {
  const parts = [int32(3 << 16)]
  for (const [name, value] of params) parts.push(cstring(name), cstring(value))
  parts.push(Buffer.from([0]))
  const body = Buffer.concat(parts)
  return Buffer.concat([int32(body.length + 4), body])
}

/** The NUL-terminated string at `pos` and the position after it (null when unterminated). */
export function readCString(bytes: Buffer, pos: number): { text: string; next: number } | null {
  const end = bytes.indexOf(0, pos)
  return end < 0 ? null : { text: bytes.toString('utf8', pos, end), next: end + 1 }
}

const BACKEND_KEY_DATA_LENGTH = 13
const READY_FOR_QUERY_LENGTH = 6

/** A ParameterStatus message per parameter, in one buffer. */
export function parameterStatuses(parameters: [string, string][]): Buffer {
  let length = 0
  for (const [name, value] of parameters)
    length += 7 + Buffer.byteLength(name) + Buffer.byteLength(value)
  const out = Buffer.allocUnsafe(length)
  let pos = 0
  for (const [name, value] of parameters) {
    const start = pos
    out[pos] = 0x53 // ParameterStatus
    pos += 5
    pos += out.write(name, pos)
    out[pos++] = 0
    pos += out.write(value, pos)
    out[pos++] = 0
    out.writeUInt32BE(pos - start - 1, start + 1)
  }
  return out
}

/**
 * The greeting that ends a login, in one buffer: `head` (the last authentication messages),
 * `statuses` (parameterStatuses), BackendKeyData with `key` (8 bytes), ReadyForQuery (idle).
 */
export function greeting(head: Buffer, statuses: Buffer, key: Buffer): Buffer {
  const out = Buffer.allocUnsafe(
    head.length + statuses.length + BACKEND_KEY_DATA_LENGTH + READY_FOR_QUERY_LENGTH,
  )
  let pos = head.copy(out, 0)
  pos += statuses.copy(out, pos)
  out[pos] = 0x4b // BackendKeyData
  out.writeUInt32BE(BACKEND_KEY_DATA_LENGTH - 1, pos + 1)
  key.copy(out, pos + 5, 0, 8)
  pos += BACKEND_KEY_DATA_LENGTH
  out[pos] = 0x5a // ReadyForQuery
  out.writeUInt32BE(READY_FOR_QUERY_LENGTH - 1, pos + 1)
  out[pos + 5] = 0x49 // 'I'
  return out
}
