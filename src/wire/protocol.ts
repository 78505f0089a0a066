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

/** Password and SASL messages are small; PostgreSQL caps them alike. */
export const MAX_AUTH_MESSAGE = 10000

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
  CloseComplete = 0x33, // 3
  CommandComplete = 0x43, // C
  DataRow = 0x44, // D
  EmptyQueryResponse = 0x49, // I
  ErrorResponse = 0x45, // E
  NoticeResponse = 0x4e, // N
  ParameterStatus = 0x53, // S
  ParseComplete = 0x31, // 1
  ReadyForQuery = 0x5a, // Z
  RowDescription = 0x54, // T
}

/** The request codes of an Authentication message. */
export const AUTH_OK = 0
export const AUTH_CLEARTEXT = 3
export const AUTH_MD5 = 5
export const AUTH_SASL = 10
export const AUTH_SASL_CONTINUE = 11
export const AUTH_SASL_FINAL = 12

/** The one-byte answers to an SSLRequest: go ahead with TLS, or go on in plaintext. */
export const SSL_ACCEPTED = 0x53 // S
export const SSL_REFUSED = 0x4e // N

/** The transaction status a ReadyForQuery carries: its one body byte, as a letter. */
export const TransactionStatus = {
  Idle: 'I',
  InTransaction: 'T',
  /** In a transaction that failed: every statement is refused until it ends. */
  Failed: 'E',
} as const
export type TransactionStatus = (typeof TransactionStatus)[keyof typeof TransactionStatus]

/** The status a ReadyForQuery's status byte stands for (PostgreSQL sends no other letters). */
export const transactionStatus = (byte: number): TransactionStatus =>
  String.fromCharCode(byte) as TransactionStatus

/** The type letters of an ErrorResponse's (or NoticeResponse's) fields that pgfence reads or writes. */
export const ErrorFieldType = {
  Severity: 'S',
  /** The severity, never localised: what a proxy may match on. */
  SeverityNonLocalized: 'V',
  Code: 'C',
  Message: 'M',
  Detail: 'D',
  Hint: 'H',
  Where: 'W',
  Schema: 's',
  Table: 't',
  Column: 'c',
  /** The server function that raised it: never translated, unlike the texts. */
  Routine: 'R',
} as const
export type ErrorFieldType = (typeof ErrorFieldType)[keyof typeof ErrorFieldType]

/** What a Close or Describe names: a prepared statement (the other kind is a portal, 'P'). */
export const STATEMENT_TARGET = 0x53 // S

/** Every message type a client may send after startup. */
export const FRONTEND_TYPE_CHARS = String.fromCharCode(
  Frontend.Bind,
  Frontend.Close,
  Frontend.CopyData,
  Frontend.CopyDone,
  Frontend.CopyFail,
  Frontend.Describe,
  Frontend.Execute,
  Frontend.Flush,
  Frontend.FunctionCall,
  Frontend.Parse,
  Frontend.Password,
  Frontend.Query,
  Frontend.Sync,
  Frontend.Terminate,
)

/** A 256-entry table of message types: 1 for each of `types`. */
export function typeTable(types: Iterable<number>): Uint8Array {
  const table = new Uint8Array(256)
  for (const type of types) table[type] = 1
  return table
}

/** A 256-entry table: is this byte a message type a client may send? */
export const FRONTEND_TYPES: Uint8Array = typeTable(
  Array.from(FRONTEND_TYPE_CHARS, (type) => type.charCodeAt(0)),
)
