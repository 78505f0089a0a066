/** Constants of the PostgreSQL v3 wire protocol that the proxy acts on. */

export const SSL_REQUEST_CODE = 80877103
export const GSSENC_REQUEST_CODE = 80877104
export const CANCEL_REQUEST_CODE = 80877102
export const PROTOCOL_3_MAJOR = 3

/** Startup-phase packets have no type byte; PostgreSQL caps them at 10000 bytes. */
export const MIN_STARTUP_PACKET = 8
export const MAX_STARTUP_PACKET = 10000
export const CANCEL_REQUEST_LENGTH = 16

/** Typed messages: one type byte, then an int32 length that counts itself. */
export const HEADER_BYTES = 5

export const enum Frontend {
  Bind = 0x42, // B
  Close = 0x43, // C
  CopyData = 0x64, // d
  CopyDone = 0x63, // c
  CopyFail = 0x66, // f
  Describe = 0x44, // D
  Execute = 0x45, // E
  Flush = 0x48, // H
  FunctionCall = 0x46, // F
  Parse = 0x50, // P
  Password = 0x70, // p (also SASL and GSS responses)
  Query = 0x51, // Q
  Sync = 0x53, // S
  Terminate = 0x58, // X
}

export const enum Backend {
  Authentication = 0x52, // R
  BackendKeyData = 0x4b, // K
  CommandComplete = 0x43, // C
  ErrorResponse = 0x45, // E
  NoticeResponse = 0x4e, // N
  ParameterStatus = 0x53, // S
  ReadyForQuery = 0x5a, // Z
}

export const AUTH_SASL = 10

/** Every message type a client may send after startup. */
export const FRONTEND_TYPE_CHARS = 'BCdcfDEHFPpQSX'

/** A 256-entry table: is this byte a message type a client may send? */
export const FRONTEND_TYPES: Uint8Array = (() => {
  const table = new Uint8Array(256)
  for (const type of FRONTEND_TYPE_CHARS) table[type.charCodeAt(0)] = 1
  return table
})()
