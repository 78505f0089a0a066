import { isUtf8 } from 'node:buffer'
import type { StatementRewriter } from '../rewrite/statement-rewriter.js'
import { Frontend } from '../wire/protocol.js'

/** Text encoding that round-trips the client's bytes: UTF-8 when valid, else byte for byte. */
export const encodingOf = (bytes: Buffer): BufferEncoding => (isUtf8(bytes) ? 'utf8' : 'latin1')

/** A message of `type` whose body is `before`, then `text` and a NUL, then `after`: one copy. */
function encodeMessage(
  type: number,
  text: string,
  encoding: BufferEncoding,
  before?: Buffer,
  after?: Buffer,
): Buffer {
  const textLength = Buffer.byteLength(text, encoding)
  const bodyLength = (before?.length ?? 0) + textLength + 1 + (after?.length ?? 0)
  const message = Buffer.allocUnsafe(5 + bodyLength)
  message[0] = type
  message.writeUInt32BE(bodyLength + 4, 1)
  let pos = 5
  if (before) pos += before.copy(message, pos)
  pos += message.write(text, pos, encoding)
  message[pos++] = 0
  after?.copy(message, pos)
  return message
}

/**
 * Applies the rewriter to one whole Query or Parse message; returns the message to send
 * upstream (the same buffer when nothing changes).
 */
export function interceptStatement(message: Buffer, rewriter: StatementRewriter): Buffer {
  return message[0] === Frontend.Query
    ? rewriteQuery(message, rewriter)
    : rewriteParse(message, rewriter)
}

function rewriteQuery(message: Buffer, rewriter: StatementRewriter): Buffer {
  const textBytes = message.subarray(5, message.length - 1)
  const encoding = encodingOf(textBytes)
  const rewritten = rewriter.rewriteQuery(textBytes.toString(encoding))
  if (rewritten === null) return message
  return encodeMessage(Frontend.Query, rewritten, encoding)
}

/** Parse: name\0 query\0 int16 count, int32 type oids — only the query changes. */
function rewriteParse(message: Buffer, rewriter: StatementRewriter): Buffer {
  const nameEnd = message.indexOf(0, 5)
  const queryEnd = nameEnd < 0 ? -1 : message.indexOf(0, nameEnd + 1)
  if (queryEnd < 0) return message // malformed: PostgreSQL rejects it itself
  const textBytes = message.subarray(nameEnd + 1, queryEnd)
  const encoding = encodingOf(textBytes)
  const rewritten = rewriter.rewriteParse(textBytes.toString(encoding))
  if (rewritten === null) return message
  return encodeMessage(
    Frontend.Parse,
    rewritten,
    encoding,
    message.subarray(5, nameEnd + 1),
    message.subarray(queryEnd + 1),
  )
}
