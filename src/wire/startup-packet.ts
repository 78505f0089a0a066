import {
  CANCEL_REQUEST_CODE,
  CANCEL_REQUEST_LENGTH,
  GSSENC_REQUEST_CODE,
  MAX_STARTUP_PACKET,
  MIN_STARTUP_PACKET,
  PROTOCOL_3_MAJOR,
  SSL_REQUEST_CODE,
} from './protocol.js'
import { PgError } from './error-response.js'

export type StartupPacket =
  | { kind: 'ssl' }
  | { kind: 'gssenc' }
  | { kind: 'cancel'; bytes: Buffer }
  | { kind: 'startup'; bytes: Buffer; minor: number; params: Map<string, string> }

/**
 * Length of the startup-phase packet at the head of `buffered`, or 0 if its length word has not
 * arrived yet. Throws before anything is allocated for a length outside PostgreSQL's bounds: a
 * plain Error, since PostgreSQL closes such a connection without an answer (a client may send
 * Terminate before its StartupMessage and expects no FATAL).
 */
export function startupPacketLength(buffered: Buffer): number {
  if (buffered.length < 4) return 0
  const length = buffered.readUInt32BE(0)
  if (length < MIN_STARTUP_PACKET || length > MAX_STARTUP_PACKET) {
    throw new Error(`invalid length of startup packet: ${length}`)
  }
  return length
}

/** Decodes one whole startup-phase packet (its length already checked). */
export function decodeStartupPacket(bytes: Buffer): StartupPacket {
  const code = bytes.readUInt32BE(4)
  if (code === SSL_REQUEST_CODE) return { kind: 'ssl' }
  if (code === GSSENC_REQUEST_CODE) return { kind: 'gssenc' }
  if (code === CANCEL_REQUEST_CODE) {
    if (bytes.length !== CANCEL_REQUEST_LENGTH) {
      throw new PgError('08P01', 'invalid length of cancel request packet')
    }
    return { kind: 'cancel', bytes }
  }
  const major = code >>> 16
  if (major !== PROTOCOL_3_MAJOR) {
    throw new PgError(
      '0A000',
      `unsupported frontend protocol ${major}.${code & 0xffff}: server supports 3.0 to 3.0`,
    )
  }
  return { kind: 'startup', bytes, minor: code & 0xffff, params: decodeParams(bytes) }
}

/** Name/value pairs of NUL-terminated strings, ended by an empty name. */
function decodeParams(bytes: Buffer): Map<string, string> {
  const params = new Map<string, string>()
  let pos = 8
  while (pos < bytes.length && bytes[pos] !== 0) {
    const nameEnd = bytes.indexOf(0, pos)
    const valueEnd = nameEnd < 0 ? -1 : bytes.indexOf(0, nameEnd + 1)
    if (valueEnd < 0)
      throw new PgError('08P01', 'invalid startup packet layout: expected terminator as last byte')
    params.set(bytes.toString('utf8', pos, nameEnd), bytes.toString('utf8', nameEnd + 1, valueEnd))
    pos = valueEnd + 1
  }
  if (pos !== bytes.length - 1) {
    throw new PgError('08P01', 'invalid startup packet layout: expected terminator as last byte')
  }
  if (!params.get('user'))
    throw new PgError('28000', 'no PostgreSQL user name specified in startup packet')
  return params
}

/** The bytes of a CancelRequest or SSLRequest, as a client would send them. */
export function encodeRequestCode(code: number): Buffer {
  const packet = Buffer.allocUnsafe(8)
  packet.writeUInt32BE(8, 0)
  packet.writeUInt32BE(code, 4)
  return packet
}
