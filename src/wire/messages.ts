/** Encoders for the messages pgfence writes itself when it speaks for a server or a client. */
import type { BackendKey } from './backend-key.js'
import {
  AUTH_SASL,
  Backend,
  CANCEL_REQUEST_CODE,
  CANCEL_REQUEST_LENGTH,
  Frontend,
  HEADER_BYTES,
  TransactionStatus,
} from './protocol.js'

const cstring = (text: string): Buffer => Buffer.from(`${text}\0`, 'utf8')

/** A typed message: type byte, length (counting itself), body. */
export function typedMessage(type: Backend | Frontend, ...parts: Buffer[]): Buffer {
  const body = Buffer.concat(parts)
  const out = Buffer.allocUnsafe(HEADER_BYTES + body.length)
  out[0] = type
  out.writeUInt32BE(4 + body.length, 1)
  body.copy(out, HEADER_BYTES)
  return out
}

const int16 = (value: number): Buffer => {
  const out = Buffer.allocUnsafe(2)
  out.writeInt16BE(value)
  return out
}

const int32 = (value: number): Buffer => {
  const out = Buffer.allocUnsafe(4)
  out.writeInt32BE(value)
  return out
}

const uint32 = (value: number): Buffer => {
  const out = Buffer.allocUnsafe(4)
  out.writeUInt32BE(value)
  return out
}

export const authentication = (code: number, data: Buffer = Buffer.alloc(0)): Buffer =>
  typedMessage(Backend.Authentication, int32(code), data)

export const authenticationSasl = (mechanisms: string[]): Buffer =>
  typedMessage(
    Backend.Authentication,
    int32(AUTH_SASL),
    ...mechanisms.map(cstring),
    Buffer.from([0]),
  )

export const parameterStatus = (name: string, value: string): Buffer =>
  typedMessage(Backend.ParameterStatus, cstring(name), cstring(value))

export const backendKeyData = (key: BackendKey): Buffer =>
  typedMessage(Backend.BackendKeyData, uint32(key.processId), uint32(key.secretKey))

/** A CancelRequest (untyped, sent on a connection of its own) for the backend of `key`. */
export function cancelRequest(key: BackendKey): Buffer {
  const request = Buffer.allocUnsafe(CANCEL_REQUEST_LENGTH)
  request.writeUInt32BE(CANCEL_REQUEST_LENGTH, 0)
  request.writeUInt32BE(CANCEL_REQUEST_CODE, 4)
  request.writeUInt32BE(key.processId, 8)
  request.writeUInt32BE(key.secretKey, 12)
  return request
}

export const readyForQuery = (status: TransactionStatus = TransactionStatus.Idle): Buffer =>
  typedMessage(Backend.ReadyForQuery, Buffer.from(status, 'latin1'))

export const emptyQueryResponse = (): Buffer => typedMessage(Backend.EmptyQueryResponse)

export const commandComplete = (tag: string): Buffer =>
  typedMessage(Backend.CommandComplete, cstring(tag))

const TEXT_OID = 25

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
  return typedMessage(Backend.RowDescription, int16(columns.length), ...fields)
}

/** DataRow in text format; null is SQL NULL. */
export function dataRow(values: readonly (string | null)[]): Buffer {
  const cells = values.map((value) => {
    if (value === null) return int32(-1)
    const bytes = Buffer.from(value, 'utf8')
    return Buffer.concat([int32(bytes.length), bytes])
  })
  return typedMessage(Backend.DataRow, int16(values.length), ...cells)
}

export const query = (text: string): Buffer => typedMessage(Frontend.Query, cstring(text))

export const passwordMessage = (password: string): Buffer =>
  typedMessage(Frontend.Password, cstring(password))

export const saslInitialResponse = (mechanism: string, data: string): Buffer => {
  const bytes = Buffer.from(data, 'utf8')
  return typedMessage(Frontend.Password, cstring(mechanism), int32(bytes.length), bytes)
}

export const saslResponse = (data: string): Buffer =>
  typedMessage(Frontend.Password, Buffer.from(data, 'utf8'))

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
    out[pos] = Backend.ParameterStatus
    pos += HEADER_BYTES
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
 * `statuses` (parameterStatuses), BackendKeyData with `key`, ReadyForQuery (idle).
 */
export function greeting(head: Buffer, statuses: Buffer, key: BackendKey): Buffer {
  const out = Buffer.allocUnsafe(
    head.length + statuses.length + BACKEND_KEY_DATA_LENGTH + READY_FOR_QUERY_LENGTH,
  )
  let pos = head.copy(out, 0)
  pos += statuses.copy(out, pos)
  out[pos] = Backend.BackendKeyData
  out.writeUInt32BE(BACKEND_KEY_DATA_LENGTH - 1, pos + 1)
  out.writeUInt32BE(key.processId, pos + HEADER_BYTES)
  out.writeUInt32BE(key.secretKey, pos + HEADER_BYTES + 4)
  pos += BACKEND_KEY_DATA_LENGTH
  out[pos] = Backend.ReadyForQuery
  out.writeUInt32BE(READY_FOR_QUERY_LENGTH - 1, pos + 1)
  out.write(TransactionStatus.Idle, pos + HEADER_BYTES, 'latin1')
  return out
}
