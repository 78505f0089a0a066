import type { UpstreamCredentials } from '../auth/client-authenticator.js'
import {
  connectUpstream,
  type ServerBytesHandler,
  type UpstreamSocket,
} from '../server/upstream-connector.js'
import { loginUpstream, serverError } from '../server/credential-login.js'
import type { BackendKey } from '../wire/backend-key.js'
import { decodeErrorFields, PgError } from '../wire/error-response.js'
import { MessageQueue, typedMessageLength } from '../wire/message-queue.js'
import { query, typedMessage } from '../wire/messages.js'
import { decodeParameterStatus } from '../wire/parameter-status.js'
import {
  Backend,
  Frontend,
  HEADER_BYTES,
  TransactionStatus,
  transactionStatus,
} from '../wire/protocol.js'
import type { UpstreamNode } from '../upstream/upstream-node.js'
import type { Config } from '../config/schema.js'
import { retakePresenceSql } from '../schema/proxy-presence.js'
import { resumeReading, stopReading } from '../net/socket-handle.js'
import { nativeTlsChannel } from '../net/native-tls.js'
import { plainDescriptor } from '../relay/native-relay.js'
import { ServerLink, type LinkEventHandler, type ServerLinkHandle } from '../relay/server-link.js'

/** Server messages pgfence reads while it drives a connection itself are small. */
const MAX_DRIVEN_MESSAGE = 1024 * 1024
const DISCARD_ALL = query('DISCARD ALL')
const ROLLBACK_AND_DISCARD = Buffer.concat([query('ROLLBACK'), DISCARD_ALL])
const SYNC_AND_DISCARD = Buffer.concat([typedMessage(Frontend.Sync), DISCARD_ALL])
/** A transaction left open or aborted by the client: DISCARD ALL refuses to run in it. */
const IN_TRANSACTION = new Set(['25001', '25P02'])

/**
 * One logged-in server connection of a pool. Its bytes go to whoever holds it: a client's
 * session, or pgfence itself between clients (login, reset, settings), through a MessageQueue.
 */
export class ServerConnection {
  readonly createdAt = Date.now()
  idleSince = 0
  parameters = new Map<string, string>()
  /** What the server reported at login: the values a reset returns its settings to. */
  own: ReadonlyMap<string, string> = new Map()
  backendKey: BackendKey = { processId: 0, secretKey: 0 }
  /** Transaction mode: the session settings pgfence applied here (empty: the defaults). */
  settings = new Map<string, string>()
  /**
   * Session mode: settings of the client before, applied again after the reset: the value it
   * asked for, and the connection's own (src/session/carried-settings.ts).
   */
  readonly carried = new Map<string, { asked: string; own: string }>()
  /** Transaction mode: the Parse message each named statement here was made from. */
  readonly prepared = new Map<string, Buffer>()
  /** Its resets take the proxy's presence lock again (Pool.keepPresenceOn). */
  holdsPresence = false
  private lastResetWrite: ResetWrite | null = null
  private receiver: ServerBytesHandler
  /** The holder's own reaction to the server closing (one listener for the connection's life). */
  private onClose: (() => void) | null = null
  private queue = new MessageQueue(typedMessageLength(MAX_DRIVEN_MESSAGE))
  /** C watches the connection (its socket does not read): kept from a session's clean end. */
  private link: ServerLink | null = null

  private constructor(
    readonly socket: UpstreamSocket,
    /** The node it is connected to: lent only while that node is the primary. */
    readonly node: UpstreamNode,
  ) {
    this.receiver = this.toQueue
    socket.on('close', () => {
      this.queue.fail(new PgError('08006', 'server closed the connection'))
      this.onClose?.()
    })
    socket.on('error', () => {})
  }

  /** Logs in to `config.upstream`, with `config.tcpKeepalive` (those in force now). */
  static async open(
    node: UpstreamNode,
    tcpKeepalive: Config['tcpKeepalive'],
    user: string,
    database: string,
    credentials: UpstreamCredentials,
    nativeTls = false,
  ): Promise<ServerConnection> {
    const upstream = node.config
    const box: { connection?: ServerConnection } = {}
    const socket = await connectUpstream(upstream, (chunk) => box.connection!.receiver(chunk), {
      nativeTls,
      keepalive: tcpKeepalive,
    })
    const connection = (box.connection = new ServerConnection(socket, node))
    const timer = setTimeout(() => socket.destroy(), upstream.connectTimeoutMs)
    try {
      const identity = await loginUpstream(connection.conversation(), user, database, credentials)
      connection.parameters = identity.parameters
      connection.own = new Map(identity.parameters)
      connection.backendKey = identity.backendKey
      return connection
    } catch (err) {
      socket.destroy()
      throw err
    } finally {
      clearTimeout(timer)
    }
  }

  /**
   * A session ended cleanly on the native relay, which kept watching the connection: the reset
   * goes out from C (reset), and the next session's relay takes the link (takeLink).
   */
  keepLink(handle: ServerLinkHandle): void {
    this.receiver = this.toQueue
    this.onClose = null
    this.link = new ServerLink(handle, () => this.socket.destroy())
  }

  /**
   * As keepLink, for a link C took back onto its shelf with the reset under way there (lending in
   * C, src/native/link-shelf.h): returns what C tells of the link's end.
   */
  keepLinkOnShelf(handle: ServerLinkHandle): LinkEventHandler {
    this.keepLink(handle)
    return this.link!.onShelf()
  }

  /** What C tells of the waiting link's end once it is back on its shelf (lending in C). */
  linkEndOnShelf(): LinkEventHandler {
    return this.link!.onShelf()
  }

  /**
   * The link for a relay to take over, when C watches the connection (its socket stays stopped);
   * a link that cannot go over is closed, and the socket reads again.
   */
  takeLink(): ServerLinkHandle | null {
    const handle = this.link?.take() ?? null
    if (handle) this.link = null
    else this.readAgain()
    return handle
  }

  /** The link, while C watches the connection idle after a clean reset (lending in C). */
  waitingLink(): ServerLinkHandle | null {
    return this.link?.waitingHandle() ?? null
  }

  /**
   * The link, C watching the idle connection from now on, for one JavaScript relayed last (a
   * transaction pool's) to be lent in C; null when it cannot be: TLS, or bytes not yet taken.
   */
  watchInC(): ServerLinkHandle | null {
    if (this.link) return this.waitingLink()
    const fd = nativeTlsChannel(this.socket) ? null : plainDescriptor(this.socket)
    if (fd === null || !ServerLink.canWatch) return null
    stopReading(this.socket, false)
    this.link = ServerLink.watching(fd, () => this.socket.destroy())
    return this.waitingLink()
  }

  /** pgfence reads the connection itself from here on: the link, if any, lets it go. */
  private readAgain(): void {
    if (!this.link) return
    this.link.close()
    this.link = null
    this.queue = new MessageQueue(typedMessageLength(MAX_DRIVEN_MESSAGE))
    resumeReading(this.socket)
  }

  get alive(): boolean {
    return this.node.primary && !this.socket.destroyed && this.socket.readyState === 'open'
  }

  /** Hands the server's bytes to a client's session, and tells it if the server closes. */
  attach(receiver: ServerBytesHandler, onClose: (() => void) | null = null): void {
    this.readAgain()
    this.receiver = receiver
    this.onClose = onClose
  }

  /** Takes the server's bytes back from a session. */
  detach(): void {
    this.receiver = this.toQueue
    this.onClose = null
    this.queue = new MessageQueue(typedMessageLength(MAX_DRIVEN_MESSAGE))
    this.socket.resume()
  }

  /**
   * Runs a simple Query whose results are dropped (ParameterStatus kept); rejects with the
   * server's error, after its ReadyForQuery.
   */
  async run(text: string): Promise<void> {
    this.readAgain()
    this.socket.write(query(text))
    return this.answer()
  }

  /** Reads the answer to a simple Query sent already, as run() does. */
  private async answer(): Promise<void> {
    let failure: PgError | null = null
    for (;;) {
      const message = this.queue.take() ?? (await this.queue.next())
      if (message[0] === Backend.ErrorResponse) failure ??= serverError(message)
      else if (message[0] === Backend.ParameterStatus) this.noteParameter(message)
      else if (message[0] === Backend.ReadyForQuery) {
        if (failure) throw failure
        return
      }
    }
  }

  /** Runs a simple Query and returns the text values of its rows. */
  async rows(text: string): Promise<(string | null)[][]> {
    const messages = await this.response(text)
    const failure = messages.find((message) => message[0] === Backend.ErrorResponse)
    if (failure) throw serverError(failure)
    return messages.filter((message) => message[0] === Backend.DataRow).map(decodeDataRow)
  }

  /** Runs a simple Query and returns every message of its response but the ReadyForQuery. */
  async response(text: string): Promise<Buffer[]> {
    this.readAgain()
    this.socket.write(query(text))
    const messages: Buffer[] = []
    for (;;) {
      const message = this.queue.take() ?? (await this.queue.next())
      if (message[0] === Backend.ReadyForQuery) return messages
      messages.push(message)
    }
  }

  /**
   * DISCARD ALL, so that nothing of one client reaches the next; a transaction the client left
   * open is rolled back first. Output of work the client left in flight is skipped. In the same
   * write, so that one round trip does it all, follow the presence lock taken again (the DISCARD
   * released it; `holdsPresence`) and the statement `then`. `done` gets false when the
   * connection cannot be reused as it is, or when one of those failed.
   */
  reset(
    unclean: boolean,
    timeoutMs: number,
    then: string | null,
    done: (reusable: boolean) => void,
  ): void {
    if (this.link && !unclean) return this.resetInC(this.cleanResetWrite(then), timeoutMs, done)
    void this.resetHere(unclean, timeoutMs, then).then(done)
  }

  /** The reset read through the connection's socket (see reset). */
  private async resetHere(unclean: boolean, timeoutMs: number, then: string | null) {
    const after = this.afterDiscard(then)
    this.readAgain()
    const timer = this.failAfter(timeoutMs, 'reset timed out')
    try {
      this.socket.write(Buffer.concat([unclean ? SYNC_AND_DISCARD : DISCARD_ALL, ...after]))
      let discarded = false
      let retried = false
      for (;;) {
        const message = this.queue.take() ?? (await this.queue.next())
        const type = message[0]
        if (type === Backend.ParameterStatus) this.noteParameter(message)
        else if (type === Backend.CommandComplete)
          discarded = message.toString('latin1', 5, 16) === 'DISCARD ALL'
        else if (type === Backend.ErrorResponse && !retried) {
          const code = decodeErrorFields(message).code ?? ''
          // What followed the DISCARD fails in the aborted transaction too: skipped, sent again.
          if (IN_TRANSACTION.has(code)) {
            retried = true
            this.socket.write(Buffer.concat([ROLLBACK_AND_DISCARD, ...after]))
          }
        } else if (type === Backend.ReadyForQuery && discarded) {
          this.forgetSession()
          if (transactionStatus(message[HEADER_BYTES]!) !== TransactionStatus.Idle) return false
          for (let i = 0; i < after.length; i++) await this.answer()
          return true
        }
      }
    } catch {
      return false
    } finally {
      clearTimeout(timer)
    }
  }

  /** What follows the DISCARD ALL in the reset's write (see reset), one Query each. */
  private afterDiscard(then: string | null): Buffer[] {
    return [this.holdsPresence ? retakePresenceSql : null, then]
      .filter((text) => text !== null)
      .map(query)
  }

  /**
   * A clean reset's write, made again only when what follows the DISCARD changes: the clients
   * of a connection mostly carry the same settings.
   */
  cleanResetWrite(then: string | null): ResetWrite {
    const known = this.lastResetWrite
    if (known && known.presence === this.holdsPresence && known.then === then) return known
    const after = this.afterDiscard(then)
    const bytes = after.length > 0 ? Buffer.concat([DISCARD_ALL, ...after]) : DISCARD_ALL
    const write = { presence: this.holdsPresence, then, bytes, queries: 1 + after.length }
    return (this.lastResetWrite = write)
  }

  /** The reset through the link: its statements in one write, read in C. */
  private resetInC(write: ResetWrite, timeoutMs: number, done: (reusable: boolean) => void) {
    this.link!.reset(write.bytes, write.queries, timeoutMs, (statuses) => {
      if (statuses === null) return done(false)
      for (let at = 0; at < statuses.length;) {
        const end = at + 1 + statuses.readUInt32BE(at + 1)
        this.noteParameter(statuses.subarray(at, end))
        at = end
      }
      this.forgetSession()
      done(true)
    })
  }

  /**
   * A transaction pool's connection whose reset goes out from C (lending in C): nothing prepared
   * after it, and `settings` applied as transaction pooling notes them.
   */
  resetTo(settings: ReadonlyMap<string, string>): void {
    this.forgetSession()
    this.settings = new Map(settings)
  }

  /**
   * What the reset undid on the server: pgfence forgets it too. Only maps that hold something:
   * clear() gives a map a new table, and these are mostly empty.
   */
  private forgetSession(): void {
    if (this.settings.size > 0) this.settings.clear()
    if (this.carried.size > 0) this.carried.clear()
    if (this.prepared.size > 0) this.prepared.clear()
  }

  /**
   * Runs pgfence's own statements (`work`, with run or response) with their answers due within
   * `timeoutMs`; past it they reject, and the connection is not reused.
   */
  async within<T>(timeoutMs: number, work: (connection: this) => Promise<T>): Promise<T> {
    const timer = this.failAfter(timeoutMs, `the server did not answer within ${timeoutMs} ms`)
    try {
      return await work(this)
    } finally {
      clearTimeout(timer)
    }
  }

  destroy(): void {
    this.link?.close()
    this.link = null
    this.socket.destroy()
  }

  /** What reads the server's answers fails with `reason` after `ms`. */
  private failAfter(ms: number, reason: string): NodeJS.Timeout {
    return setTimeout(() => this.queue.fail(new Error(reason)), ms)
  }

  private readonly toQueue: ServerBytesHandler = (chunk) => {
    this.queue.push(chunk)
    return true
  }

  private conversation() {
    return { send: (bytes: Buffer) => void this.socket.write(bytes), next: () => this.queue.next() }
  }

  private noteParameter(message: Buffer): void {
    const { name, value } = decodeParameterStatus(message)
    this.parameters.set(name, value)
  }
}

/** A clean reset's one write, for the statement and presence it was made for. */
export interface ResetWrite {
  presence: boolean
  then: string | null
  bytes: Buffer
  /** The simple Queries in it, DISCARD ALL included. */
  queries: number
}

function decodeDataRow(message: Buffer): (string | null)[] {
  const values: (string | null)[] = []
  let pos = 7
  for (let i = message.readUInt16BE(5); i > 0; i--) {
    const length = message.readInt32BE(pos)
    pos += 4
    values.push(length < 0 ? null : message.toString('utf8', pos, pos + length))
    pos += Math.max(length, 0)
  }
  return values
}
