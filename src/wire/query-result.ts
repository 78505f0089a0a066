import { decodeErrorFields, type ErrorFields } from './error-response.js'
import { Backend, HEADER_BYTES } from './protocol.js'

/** What the server answered to a Query: its rows (text format, by column name) or its error. */
export interface QueryResult {
  rows: Record<string, string | null>[]
  error?: ErrorFields
}

/** Reads the whole messages of one Query's response (RowDescription, DataRows, ErrorResponse). */
export function decodeQueryResult(messages: Buffer[]): QueryResult {
  const result: QueryResult = { rows: [] }
  let columns: string[] = []
  for (const message of messages) {
    if (message[0] === Backend.RowDescription) columns = columnNames(message)
    else if (message[0] === Backend.DataRow) result.rows.push(dataRow(message, columns))
    else if (message[0] === Backend.ErrorResponse) result.error = decodeErrorFields(message)
  }
  return result
}

/**
 * The responses of a Query of several statements, one per statement that ran: each ends with
 * its CommandComplete (or the ErrorResponse after which no other statement runs).
 */
export function splitResults(messages: Buffer[]): Buffer[][] {
  const results: Buffer[][] = [[]]
  for (const message of messages) {
    results[results.length - 1]!.push(message)
    if (message[0] === Backend.CommandComplete) results.push([])
  }
  return results.filter((result) => result.length > 0)
}

/** RowDescription: int16 count, then per field a name and 18 bytes of type information. */
function columnNames(message: Buffer): string[] {
  const names: string[] = []
  let pos = HEADER_BYTES + 2
  for (let i = message.readUInt16BE(HEADER_BYTES); i > 0; i--) {
    const end = message.indexOf(0, pos)
    names.push(message.toString('utf8', pos, end))
    pos = end + 1 + 18
  }
  return names
}

/** DataRow: int16 count, then per value an int32 length (-1: NULL) and the bytes. */
function dataRow(message: Buffer, columns: string[]): Record<string, string | null> {
  const row: Record<string, string | null> = {}
  let pos = HEADER_BYTES + 2
  for (let i = 0; i < message.readUInt16BE(HEADER_BYTES); i++) {
    const length = message.readInt32BE(pos)
    pos += 4
    row[columns[i] ?? String(i)] = length < 0 ? null : message.toString('utf8', pos, pos + length)
    pos += Math.max(length, 0)
  }
  return row
}
