import type { ClientConnection } from '../client/client-connection.js'
import type { Config } from '../config/schema.js'
import type { Logger } from '../log.js'
import type { Pool } from '../pool/pool.js'
import type { ServerConnection } from '../pool/server-connection.js'
import { settingsStatement } from '../pool/startup-settings.js'
import { statementEffects } from '../pool/transaction-rules.js'
import { readBackendKey, type BackendKey } from '../server/cancel-forwarder.js'
import { decodeErrorFields, PgError } from '../wire/error-response.js'
import { resumeReading, stopReading } from '../wire/socket-handle.js'
import { MessageFramer } from '../wire/message-framer.js'
import { backendKeyData, query, readCString, typedMessage } from '../wire/messages.js'
import {
  Backend,
  Frontend,
  FRONTEND_TYPE_CHARS,
  FRONTEND_TYPES,
  HEADER_BYTES,
} from '../wire/protocol.js'
import { cutError, type CutReason } from './cut-outcome.js'
import type { SettingsHolder } from './live-settings.js'
import { idleBefore, MaintenanceLog } from './maintenance-log.js'
import {
  asciiOnly,
  nativeRelayModule,
  plainDescriptor,
  type NativeRelay,
  type NativeRelaySettings,
} from './native-relay.js'
import type { PooledClient, PoolingContext } from './pooled-startup.js'
import { RequestTracker, type RequestProgress } from './request-progress.js'
import { onServerError, parameterRefusal, type OnRejection } from './server-notices.js'
import type { SessionState } from './session.js'
import { encodingOf, interceptStatement } from './statement-interceptor.js'

export interface TransactionSessionOptions {
  pool: Pool
  /** Rewriter and limits, read at each statement: a config reload swaps them. */
  live: SettingsHolder
  logger: Logger
  /** Settings whose session values follow the client from one server connection to the next. */
  trackedSettings: string[]
  /** The client's settings from its startup packet. */
  settings: [string, string][]
  resetTimeoutMs: number
  /** The server connection the client holds now, for its cancel requests. */
  held: { server: ServerConnection | null }
  /** Relay the client natively while it keeps a server connection between transactions. */
  nativeRelay: boolean
  onRejection: OnRejection
  /** Cancels what a backend runs (when pgfence cuts a client off mid-statement). */
  cancelBackend(key: BackendKey): Promise<void>
}

/** The messages that run statements: logged under pgfence.maintenance. */
const loggedTypes = new Set<number>([Frontend.Query, Frontend.Parse, Frontend.Bind])

const PARSE_COMPLETE = 0x31
const CLOSE_COMPLETE = 0x33
/** An expected ParseComplete/CloseComplete (true: pgfence's own, dropped), or a Sync. */
type Expected = boolean | 'sync'

/**
 * Words of the statements transaction pooling must see (transaction-rules.ts): the native
 * relay hands over only the Query and Parse texts that contain one (named Parse always).
 */
const POOLING_NEEDLES = ['set', 'discard', 'deallocate', 'listen', 'advisory_lock', 'hold', 'temp']

const literal = (text: string) => `'${text.replaceAll("'", "''")}'`

/** A statement that fails in PostgreSQL, at its place in the stream, with pgfence's refusal. */
const refusal = (feature: string) =>
  `DO $pgfence$BEGIN RAISE EXCEPTION USING ERRCODE = '0A000', MESSAGE = ${literal(
    `${feature} not supported in transaction pooling mode`,
  )}; END$pgfence$`

const closeStatement = (name: string) =>
  typedMessage('C', Buffer.from('S'), Buffer.from(`${name}\0`, 'utf8'))

const backendKeyOf = (server: ServerConnection) => readBackendKey(backendKeyData(server.backendKey))

/**
 * Transaction pooling: the client takes a server connection with its first message after
 * ReadyForQuery 'I' and keeps it after the transaction while no other client waits for one
 * (lazy release); it gives it back at the end of a transaction once one does, or when it leaves.
 * Its tracked settings are replayed when it takes a connection and read back when it gives one
 * back after statements that may have changed them (so PostgreSQL's own rules for SET LOCAL,
 * rollback and RESET apply); its named prepared statements are prepared again on a connection
 * that lacks them. While it keeps a connection between transactions, the native relay carries
 * its bytes and hands back only what pooling must see (settings, refused features, named
 * statements, fenced writes).
 */
export class TransactionSession {
  readonly closed: Promise<void>
  private markClosed!: () => void
  private ended = false
  private server: ServerConnection | null = null
  private checkingOut = false
  private readonly waiting: Buffer[] = []
  private readonly requests = new RequestTracker()
  private swallowReady = 0
  private expected: Expected[] = []
  private touched = false
  private readonly statements = new Map<string, Buffer>()
  private readonly settings: Map<string, string>
  private settled: Promise<void> = Promise.resolve()
  private serverBuffered = Buffer.alloc(0)
  private readonly framer: MessageFramer
  private readonly client: ClientConnection['socket']
  private native: NativeRelay | null = null
  /** Transactions the native relay counted before it stopped. */
  private nativeTransactions = 0
  /** A client waits for a connection: give this one back at the end of the transaction. */
  private giveBackWanted = false
  /** Set by closeWhenIdle: sent once the client is idle. */
  private closingWhenIdle: PgError | null = null
  private readonly maintenance: MaintenanceLog

  constructor(
    private readonly connection: ClientConnection,
    private readonly options: TransactionSessionOptions,
  ) {
    this.client = connection.socket
    this.closed = new Promise((resolve) => (this.markClosed = resolve))
    this.settings = new Map(options.settings.map(([name, value]) => [name.toLowerCase(), value]))
    this.maintenance = new MaintenanceLog(options.logger, new Map(options.settings))
    this.framer = new MessageFramer(
      {
        forward: () => {},
        intercept: (message) => this.fromClient(Buffer.from(message)),
        fail: (error) => this.finish(error),
      },
      options.live.current.limits.maxMessageBytes,
      FRONTEND_TYPES,
    )
  }

  /** Starts relaying; `server` (the one the client was greeted from) is the client's first. */
  start(leftover: Buffer, server: ServerConnection): void {
    this.connection.setReceiver((chunk) => (this.framer.push(chunk), true))
    this.client.on('close', () => this.finish())
    this.client.on('error', () => {})
    this.take(server)
    if (leftover.length > 0) this.framer.push(leftover)
    if (this.atRest()) this.betweenTransactions()
    if (!this.native) this.client.resume()
  }

  /** Where the client's requests stand while it holds a server connection (for timeouts). */
  progress(): RequestProgress | null {
    if (this.ended || !this.server) return null
    return this.native ? this.native.progress() : this.requests.snapshot()
  }

  state(): SessionState {
    const progress = this.native?.progress() ?? this.requests.snapshot()
    const native = this.native ? progress.transactions : 0
    return {
      transactions: this.requests.snapshot().transactions + this.nativeTransactions + native,
      ready: true,
      idle: progress.outstanding === 0 && progress.status === 'I' && this.waiting.length === 0,
      inTransaction: progress.status !== 'I',
    }
  }

  get relayedNatively(): boolean {
    return this.native !== null
  }

  /** A config reload: framing and the native relay follow the new settings. */
  reconfigure(): void {
    this.framer.maxMessageBytes = this.options.live.current.limits.maxMessageBytes
    this.native?.update(this.nativeSettings())
  }

  /** Closes the session now if it is idle, else once it is. */
  closeWhenIdle(error: PgError): void {
    this.closingWhenIdle = error
    if (this.state().idle || this.native?.closeWhenIdle()) this.finish(error)
  }

  /**
   * Ends the session on pgfence's own account (shutdown, a timeout): the client learns what
   * became of its transaction; a backend still running the client's statement is cancelled and
   * its connection closed, never lent again.
   */
  async cut(reason: CutReason): Promise<void> {
    if (this.ended) return
    const progress = this.progress()
    const error = cutError(reason, progress)
    this.options.logger.warn({ reason, code: error.code, ...progress }, 'ending session')
    const busy = this.server !== null && progress !== null && progress.outstanding > 0
    const cancelled = busy ? this.options.cancelBackend(backendKeyOf(this.server!)) : undefined
    this.finish(error, !busy)
    await cancelled
  }

  terminate(error?: PgError): void {
    this.finish(error)
  }

  private fromClient(message: Buffer): void {
    if (this.ended) return
    if (message[0] === Frontend.Terminate) return this.finish()
    if (loggedTypes.has(message[0]!))
      this.maintenance.observe(message, this.requests.atRest && this.waiting.length === 0)
    this.requests.clientMessage(message, 0, message.length)
    if (this.server && !this.checkingOut) return this.send(message)
    this.waiting.push(message)
    if (!this.checkingOut) void this.checkout()
  }

  private async checkout(): Promise<void> {
    this.checkingOut = true
    let server: ServerConnection
    try {
      await this.settled
      server = await this.options.pool.checkout()
    } catch (err) {
      return this.finish(err instanceof PgError ? err : new PgError('08006', String(err)))
    }
    if (this.ended) return void this.options.pool.release(server, async () => true)
    this.take(server)
    this.checkingOut = false
    for (const message of this.waiting.splice(0)) this.send(message)
  }

  /** The client holds `server` from now on, with its settings. */
  private take(server: ServerConnection): void {
    this.server = this.options.held.server = server
    this.giveBackWanted = false
    server.attach((chunk) => this.fromServer(chunk))
    server.socket.on('close', this.serverClosed)
    this.options.pool.keep(this.giveBack)
    const replay = this.replayStatement(server)
    if (replay) {
      this.swallowReady++
      server.socket.write(query(replay))
    }
  }

  /** Brings the connection's settings to the client's (RESET ALL when it has others). */
  private replayStatement(server: ServerConnection): string | null {
    const foreign = [...server.settings].some(([name]) => !this.settings.has(name))
    const set = settingsStatement([...this.settings], foreign ? new Map() : server.settings)
    server.settings = new Map(this.settings)
    if (!foreign) return set
    return set ? `RESET ALL; ${set}` : 'RESET ALL'
  }

  private send(message: Buffer): void {
    const server = this.server!
    const out: Buffer[] = []
    switch (message[0]) {
      case Frontend.Query:
        out.push(this.statement(message, HEADER_BYTES))
        break
      case Frontend.Parse: {
        const parse = this.parse(message, out)
        this.expected.push(false)
        out.push(parse)
        break
      }
      case Frontend.Bind: {
        const portal = readCString(message, HEADER_BYTES)
        this.ensurePrepared(out, portal ? readCString(message, portal.next)?.text : undefined)
        out.push(message)
        break
      }
      case Frontend.Describe:
        if (message[5] === 0x53) this.ensurePrepared(out, readCString(message, 6)?.text)
        out.push(message)
        break
      case Frontend.Close:
        this.closeNamed(message)
        this.expected.push(false)
        out.push(message)
        break
      case Frontend.Sync:
        this.expected.push('sync')
        out.push(message)
        break
      default:
        out.push(message)
    }
    server.socket.write(out.length === 1 ? out[0]! : Buffer.concat(out))
  }

  /**
   * A Parse, as it goes to the server; a named one becomes the client's statement, here and
   * wherever its transactions land. `out` takes pgfence's own messages sent before it, where
   * they can be (the JavaScript relay): a Close for another client's statement of that name.
   */
  private parse(message: Buffer, out: Buffer[] | null): Buffer {
    const name = readCString(message, HEADER_BYTES)?.text ?? ''
    const parse = this.statement(message, HEADER_BYTES + Buffer.byteLength(name) + 1)
    if (name === '') return parse
    const server = this.server!
    if (out && server.prepared.has(name)) this.inject(out, closeStatement(name))
    this.statements.set(name, parse)
    server.prepared.set(name, parse)
    return parse
  }

  /** A Close of a named statement: the client has it no more, nor has the connection. */
  private closeNamed(message: Buffer): void {
    if (message[5] !== 0x53) return
    const name = readCString(message, 6)?.text ?? ''
    this.statements.delete(name)
    this.server!.prepared.delete(name)
  }

  /** pgfence's own Close or Parse, whose completion the client must not see. */
  private inject(out: Buffer[], message: Buffer): void {
    this.expected.push(true)
    out.push(message)
  }

  /** A named statement the connection lacks (or holds another client's version of) is re-made. */
  private ensurePrepared(out: Buffer[], name: string | undefined): void {
    if (!name) return
    const server = this.server!
    const mine = this.statements.get(name)
    const theirs = server.prepared.get(name)
    if (theirs === mine) return
    if (theirs) this.inject(out, closeStatement(name))
    server.prepared.delete(name)
    if (!mine) return
    this.inject(out, mine)
    server.prepared.set(name, mine)
  }

  /** The Query or Parse to send: refused, or rewritten for fencing; its effects noted. */
  private statement(message: Buffer, textAt: number): Buffer {
    const end = message.indexOf(0, textAt)
    const bytes = message.subarray(textAt, end < 0 ? message.length : end)
    const effects = statementEffects(bytes.toString(encodingOf(bytes)))
    this.touched ||= effects.touchesSettings
    if (effects.forgets === 'all') this.statements.clear()
    else if (effects.forgets) this.statements.delete(effects.forgets)
    if (effects.forgets) this.server!.prepared.clear()
    if (effects.refused) return this.replaceText(message, textAt, end, refusal(effects.refused))
    const rewriter = this.options.live.current.rewriter
    return rewriter ? interceptStatement(message, rewriter) : message
  }

  private replaceText(message: Buffer, textAt: number, end: number, text: string): Buffer {
    const body = message.subarray(5, textAt)
    const tail = message[0] === Frontend.Parse ? Buffer.from([0, 0]) : Buffer.alloc(0)
    return typedMessage(
      String.fromCharCode(message[0]!),
      body,
      Buffer.from(`${text}\0`, 'utf8'),
      end < 0 ? Buffer.alloc(0) : tail,
    )
  }

  private fromServer(chunk: Buffer): boolean {
    if (this.ended) return true
    this.requests.serverBytes()
    let buffered = this.serverBuffered.length ? Buffer.concat([this.serverBuffered, chunk]) : chunk
    const out: Buffer[] = []
    let pos = 0
    while (buffered.length - pos >= HEADER_BYTES) {
      const total = buffered.readUInt32BE(pos + 1) + 1
      if (buffered.length - pos < total) break
      const message = buffered.subarray(pos, pos + total)
      pos += total
      if (!this.keep(message)) continue
      out.push(this.relayed(message))
      if (this.ended) return true
    }
    buffered = buffered.subarray(pos)
    this.serverBuffered = buffered.length ? Buffer.from(buffered) : Buffer.alloc(0)
    if (out.length > 0)
      this.client.write(out.length === 1 ? Buffer.from(out[0]!) : Buffer.concat(out))
    if (this.atRest()) this.betweenTransactions()
    return true
  }

  /** As without pooling: rejections counted, logged and readable; SQL lexed as pgfence does. */
  private relayed(message: Buffer): Buffer {
    const { logger, onRejection, live } = this.options
    if (message[0] === Backend.ErrorResponse)
      return onServerError(message, decodeErrorFields(message), logger, onRejection) ?? message
    if (message[0] === Backend.ParameterStatus && live.current.rewriter) {
      const refusal = parameterRefusal(message)
      if (refusal) this.finish(refusal)
    }
    return message
  }

  /** Whether a server message goes to the client; follows transactions and injected replies. */
  private keep(message: Buffer): boolean {
    const type = message[0]
    if (this.swallowReady > 0) {
      if (type === Backend.ReadyForQuery) this.swallowReady--
      return false
    }
    if (type === PARSE_COMPLETE || type === CLOSE_COMPLETE) return this.expected.shift() !== true
    if (type === Backend.ErrorResponse) {
      // The server skips to the next Sync: completions expected before it will not come.
      const sync = this.expected.indexOf('sync')
      this.expected.splice(0, sync < 0 ? this.expected.length : sync)
    } else if (type === Backend.ReadyForQuery) {
      this.requests.readyForQuery(message[5]!)
      if (this.expected[0] === 'sync') this.expected.shift()
    }
    return true
  }

  /** Nothing in flight: keep the connection (natively relayed) unless it is wanted back. */
  private betweenTransactions(): void {
    if (this.giveBackWanted || this.closingWhenIdle || this.options.pool.hasWaiters())
      return this.releaseServer()
    // Not from inside the server socket's read callback: a socket whose reads stop there and
    // start again later misses the bytes that follow.
    setImmediate(this.relayNatively)
  }

  /** The JavaScript relay stands between transactions, nothing half sent or expected. */
  private atRest(): boolean {
    return (
      this.requests.atRest &&
      this.swallowReady === 0 &&
      this.expected.length === 0 &&
      this.serverBuffered.length === 0 &&
      this.framer.atBoundary()
    )
  }

  /** The pool has a client waiting: give the connection back now if idle, else when it is. */
  private readonly giveBack = (): void => {
    if (!this.server || this.checkingOut) return
    this.giveBackWanted = true
    if (this.native ? this.native.closeWhenIdle() && this.takeBack() : this.atRest())
      this.releaseServer()
  }

  /** The connection goes back, after reading settings the client may have changed. */
  private releaseServer(): void {
    this.giveServerBack(true, true)
    if (this.closingWhenIdle && this.waiting.length === 0) return this.finish(this.closingWhenIdle)
    if (this.waiting.length > 0 && !this.checkingOut) void this.checkout()
  }

  /** `clean`: between transactions (else reset); `reusable`: else closed. */
  private giveServerBack(clean: boolean, reusable: boolean): void {
    const server = this.server!
    const pool = this.options.pool
    this.server = this.options.held.server = null
    pool.unkeep(this.giveBack)
    server.socket.off('close', this.serverClosed)
    server.detach()
    const touched = this.touched
    this.touched = false
    if (!reusable) void pool.release(server, async () => false)
    else if (!clean) {
      const resetTimeoutMs = this.options.resetTimeoutMs
      void pool.release(server, (s) => s.reset(true, resetTimeoutMs))
    } else if (touched) this.settled = this.readSettings(server)
    else void pool.release(server, async () => true)
  }

  /** Reads the tracked settings as PostgreSQL left them, then RESET ALL for the next client. */
  private async readSettings(server: ServerConnection): Promise<void> {
    const names = this.options.trackedSettings
    const columns = names.map((name) => `pg_catalog.current_setting(${literal(name)}, true)`)
    try {
      const [row] = await server.rows(`SELECT ${columns.join(', ')}; RESET ALL`)
      names.forEach((name, i) => {
        const value = row?.[i] ?? ''
        if (value === '') this.settings.delete(name)
        else this.settings.set(name, value)
      })
      server.settings = new Map()
      void this.options.pool.release(server, async () => true)
    } catch (err) {
      this.options.logger.warn({ err: (err as Error).message }, 'could not read session settings')
      void this.options.pool.release(server, (s) => s.reset(true, this.options.resetTimeoutMs))
    }
  }

  /**
   * Hands the client and its connection to the native relay, when both are plain TCP, the
   * JavaScript relay is at rest and the connection holds exactly the client's named statements
   * (so that a Bind the relay passes on finds the client's own). Returns whether it did.
   */
  private readonly relayNatively = (): boolean => {
    const server = this.server
    if (!this.options.nativeRelay || !nativeRelayModule || !server || this.native) return false
    if (this.checkingOut || this.ended || !this.atRest() || !this.holdsOwnStatements(server))
      return false
    const clientFd = plainDescriptor(this.client)
    const serverFd = plainDescriptor(server.socket)
    if (clientFd === null || serverFd === null) return false
    stopReading(this.client, false)
    stopReading(server.socket, false)
    this.native = nativeRelayModule.relay(clientFd, serverFd, {
      ...this.nativeSettings(),
      frontendTypes: FRONTEND_TYPE_CHARS,
      outstanding: 0,
      onMessage: (message) => this.fromClientNatively(message),
      onServerMessage: (message) => {
        const relayed = this.relayed(message)
        return relayed === message ? undefined : relayed
      },
      onClose: (kind, detail) => this.nativeClosed(kind, detail),
    })
    return true
  }

  private holdsOwnStatements(server: ServerConnection): boolean {
    if (server.prepared.size !== this.statements.size) return false
    for (const [name, parse] of server.prepared)
      if (this.statements.get(name) !== parse) return false
    return true
  }

  private nativeSettings(): NativeRelaySettings {
    const { rewriter, limits } = this.options.live.current
    // Under maintenance every Query, Parse and Bind comes to JavaScript, to be logged.
    const maintenance = this.maintenance.on
    const fencing = rewriter ? asciiOnly(rewriter.prefilterNeedles) : []
    return {
      maxMessageBytes: limits.maxMessageBytes,
      interceptTypes: maintenance ? 'QPCXB' : 'QPCX',
      statementNeedles: fencing && !maintenance ? [...POOLING_NEEDLES, ...fencing] : undefined,
    }
  }

  /** A message the native relay hands over: the bytes to send instead, or undefined. */
  private fromClientNatively(message: Buffer): Buffer | undefined {
    if (loggedTypes.has(message[0]!)) this.observeNatively(message)
    let out = message
    if (message[0] === Frontend.Terminate) this.finish()
    else if (message[0] === Frontend.Query) out = this.statement(message, HEADER_BYTES)
    else if (message[0] === Frontend.Parse) out = this.parse(message, null)
    else if (message[0] === Frontend.Close) this.closeNamed(message)
    return out === message ? undefined : out
  }

  /** Logs the statement under maintenance; the relay shows every one while that is on. */
  private observeNatively(message: Buffer): void {
    const was = this.maintenance.on
    this.maintenance.observe(message, idleBefore(message, this.native!.progress()))
    if (this.maintenance.on !== was) this.native!.update(this.nativeSettings())
  }

  private nativeClosed(kind: 'client' | 'server' | 'invalid' | 'idle', detail?: string): void {
    if (kind === 'server') return this.serverClosed()
    if (kind === 'invalid') return this.finish(new PgError('08P01', detail ?? 'invalid message'))
    if (kind === 'client') return this.finish()
    if (this.closingWhenIdle) return this.finish(this.closingWhenIdle)
    this.takeBack()
    this.releaseServer()
  }

  /** JavaScript relays the session again; returns whether the server's bytes end whole. */
  private takeBack(): boolean {
    const native = this.native!
    const server = this.server!
    this.nativeTransactions += native.progress().transactions
    const { toClient, toServer, serverAtBoundary } = native.stop()
    this.native = null
    resumeReading(this.client)
    resumeReading(server.socket)
    if (toClient.length > 0) this.client.write(toClient)
    if (toServer.length > 0) server.socket.write(toServer)
    return serverAtBoundary
  }

  private readonly serverClosed = (): void => {
    this.finish(new PgError('08006', 'server closed the connection unexpectedly'), false)
  }

  /**
   * Ends the session: `error` goes to the client if the server's bytes to it end whole; a
   * connection held goes back as it is between transactions, reset otherwise, or closed when
   * not `reusable`.
   */
  private finish(error?: PgError, reusable = true): void {
    if (this.ended) return
    this.ended = true
    const progress = this.native?.progress()
    const nativeRest = progress?.outstanding === 0 && progress.status === 'I'
    const atBoundary = this.native ? this.takeBack() : this.serverBuffered.length === 0
    if (error && atBoundary && this.client.writable) this.client.write(error.encode())
    if (this.server) {
      const clean = progress ? nativeRest && atBoundary : this.atRest()
      this.giveServerBack(clean, reusable)
    }
    this.client.end()
    this.client.destroySoon()
    this.markClosed()
  }
}

/** A transaction-mode session for an authenticated client. */
export function startTransactionSession(
  connection: ClientConnection,
  pooled: PooledClient,
  context: PoolingContext,
  config: Config,
  options: {
    settings: SettingsHolder
    logger: Logger
    onRejection: OnRejection
    nativeRelay: boolean
    cancelBackend(key: BackendKey): Promise<void>
  },
): TransactionSession {
  const { setting, resourceSetting } = config.fencing
  const tracked = new Set([setting, resourceSetting, 'application_name'])
  for (const [name] of pooled.settings) tracked.add(name.toLowerCase())
  const session = new TransactionSession(connection, {
    pool: pooled.pool,
    live: options.settings,
    logger: options.logger,
    trackedSettings: [...tracked],
    settings: pooled.settings,
    resetTimeoutMs: context.resetTimeoutMs,
    held: pooled.held,
    onRejection: options.onRejection,
    nativeRelay: options.nativeRelay,
    cancelBackend: options.cancelBackend,
  })
  session.closed.then(() => context.cancelKeys.forget(pooled.cancelKey))
  session.start(pooled.leftover, pooled.server)
  return session
}
