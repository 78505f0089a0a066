import type { ServerConnection } from '../pool/server-connection.js'
import { readCString, typedMessage } from '../wire/messages.js'
import { Frontend, HEADER_BYTES, STATEMENT_TARGET } from '../wire/protocol.js'

const FLUSH = typedMessage(Frontend.Flush, Buffer.alloc(0))

/** A Close of the named prepared statement `name`. */
export const closeStatement = (name: string) =>
  typedMessage(Frontend.Close, Buffer.from([STATEMENT_TARGET]), Buffer.from(`${name}\0`, 'utf8'))

/**
 * A transaction-mode client's named prepared statements, which outlive the server connections
 * they were made on: each is kept as the Parse it was made from, and prepared again on a
 * connection that lacks it (after a Close of another client's statement of the name there).
 */
export class ClientStatements {
  /** Each named statement's Parse, as it went to the server. */
  readonly parses = new Map<string, Buffer>()

  /**
   * `inject`: sends pgfence's own Close or Parse, whose completion the client must not see;
   * `send`: sends a message that has no answer.
   */
  constructor(
    private readonly inject: (message: Buffer) => void,
    private readonly send: (message: Buffer) => void,
  ) {}

  /** A named Parse goes to `server`: `parse`, the client's `message` or its rewrite. */
  made(server: ServerConnection, name: string, parse: Buffer, message: Buffer): void {
    // Kept beyond this message: a copy, not a view of a read buffer.
    const kept = parse === message ? Buffer.from(parse) : parse
    this.parses.set(name, kept)
    server.prepared.set(name, kept)
  }

  /** A Close of a named statement: the client has it no more, nor has the connection. */
  closed(server: ServerConnection, message: Buffer): void {
    if (message[HEADER_BYTES] !== STATEMENT_TARGET) return
    const name = readCString(message, HEADER_BYTES + 1)?.text ?? ''
    this.parses.delete(name)
    server.prepared.delete(name)
  }

  /** SQL DEALLOCATE (`'all'` or a name): gone for the client, and from the connection's list. */
  forget(server: ServerConnection, forgets: 'all' | string | null): void {
    if (!forgets) return
    if (forgets === 'all') this.parses.clear()
    else this.parses.delete(forgets)
    server.prepared.clear()
  }

  /**
   * Closes every other client's statement on the connection, then asks the server to answer at
   * once (Flush): the native relay may carry the client only on a connection that holds no one
   * else's, since a Bind it passes on must find the client's own statement or none. Returns
   * whether there was any.
   */
  closeAllForeign(server: ServerConnection): boolean {
    const held = server.prepared.size
    for (const [name, theirs] of server.prepared)
      if (!this.takeSame(name, theirs)) this.closeForeign(server, name)
    const closed = server.prepared.size < held
    if (closed) this.send(FLUSH)
    return closed
  }

  /** Another client's statement of this name on the connection is closed first. */
  closeForeign(server: ServerConnection, name: string): void {
    const theirs = server.prepared.get(name)
    if (!theirs || theirs === this.parses.get(name)) return
    this.inject(closeStatement(name))
    server.prepared.delete(name)
  }

  /**
   * Another client's Parse of the same bytes made the same statement: the client uses it as its
   * own, compared by identity from now on. Returns whether it did.
   */
  private takeSame(name: string, theirs: Buffer): boolean {
    if (!this.parses.get(name)?.equals(theirs)) return false
    this.parses.set(name, theirs)
    return true
  }

  /** A named statement the connection lacks (or holds another client's version of) is re-made. */
  ensurePrepared(server: ServerConnection, name: string | undefined): void {
    if (!name) return
    const mine = this.parses.get(name)
    const theirs = server.prepared.get(name)
    if (theirs === mine || (theirs && this.takeSame(name, theirs))) return
    if (theirs) this.inject(closeStatement(name))
    server.prepared.delete(name)
    if (!mine) return
    this.inject(mine)
    server.prepared.set(name, mine)
  }
}
