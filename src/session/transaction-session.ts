import type { ClientConnection } from '../client/client-connection.js'
import type { LevelLogger } from '../log.js'
import type { Pool } from '../pool/pool.js'
import type { ServerConnection } from '../pool/server-connection.js'
import { statementEffects } from '../pool/transaction-rules.js'
import { maintenanceNeedle as maintenanceSetting } from '../rewrite/statement-marker.js'
import type { BackendKey } from '../wire/backend-key.js'
import { decodeErrorFields, PgError } from '../wire/error-response.js'
import { EVERY_TYPE, FROM_CLIENT, FROM_SERVER, MessageFramer } from '../wire/message-framer.js'
import { query, readCString, typedMessage } from '../wire/messages.js'
import {
  Backend,
  Frontend,
  FRONTEND_TYPES,
  HEADER_BYTES,
  STATEMENT_TARGET,
  TransactionStatus,
} from '../wire/protocol.js'
import { cancelUnlessCommitting, cutError, type CutReason } from './cut-outcome.js'
import { AnswerLedger } from './answer-ledger.js'
import { KeptConnectionRelay } from './kept-connection-relay.js'
import { LazyRelease } from './lazy-release.js'
import type { GreetedClient, PoolingContext } from './pooled-startup.js'
import type { SettingsHolder } from '../fencing/live-settings.js'
import { idleBefore, MaintenanceLog, observedTypes } from '../fencing/maintenance-log.js'
import { RequestTracker, type RequestProgress } from '../relay/request-progress.js'
import {
  onServerError,
  parameterRefusal,
  unknownCommit,
  type OnRejection,
} from '../fencing/server-notices.js'
import type { SessionState } from './session.js'
import type { NativeRelay, RelayCallbacks, RelayEnd } from '../relay/native-relay.js'
import type { LinkEventHandler } from '../relay/server-link.js'
import { nextPhase, type TransactionPhase } from './transaction-phase.js'
import { readBackSettings, replayStatement, settingsByName } from './settings-replay.js'
import { ClientStatements, closeStatement } from './statement-repreparation.js'
import { encodingOf, interceptStatement } from '../relay/statement-interceptor.js'
import { readableRefusal, refusalStatement } from '../pool/transaction-pool-refusals.js'

export interface TransactionSessionOptions {
  pool: Pool
  /** Rewriter and limits, read at each statement: a config reload swaps them. */
  live: SettingsHolder
  logger: LevelLogger
  /**
   * Settings whose session values follow the client from one server connection to the next,
   * read when they are (the token settings are the config's in force).
   */
  trackedSettings(): string[]
  /** The client's settings from its startup packet. */
  settings: [string, string][]
  resetTimeoutMs: number
  /** The server connection the client holds now, for its cancel requests. */
  held: { server: ServerConnection | null }
  /** Keep the connection between transactions while no client waits, relayed natively. */
  nativeRelay: boolean
  onRejection: OnRejection
  /** Cancels what a backend of `server`'s node runs (pgfence cuts a client off mid-statement). */
  cancelBackend(key: BackendKey, server: ServerConnection): Promise<void>
  /** Whether a COMMIT on `server`'s node may wait for a synchronous standby. */
  commitsMayWait(server: ServerConnection): Promise<boolean>
  /**
   * The client leaves, `server` the connection it used last, with the client's settings as they
   * came: held still (it goes back next), or given back since (lending in C may shelve it for the
   * client's StartupMessage).
   */
  leaving?(server: ServerConnection): void
  /**
   * Lent in C: at a goodbye between transactions the connection may go back on the shelf in C,
   * the next client to get `key` (LendingInC); null when it comes back through the pool.
   */
  backOnShelf?(key: BackendKey): LinkEventHandler | null
}

/**
 * Transaction pooling: the client takes a server connection with its first message after
 * ReadyForQuery 'I'. At the next ReadyForQuery 'I' with nothing in flight it gives it back, or,
 * with the native relay, keeps it while no other client waits for one (lazy release) and gives
 * it back at the end of the transaction in which one starts to. Its tracked settings are
 * replayed when it takes a connection and read back when it gives back one on which they may
 * have changed (so PostgreSQL's own rules for SET LOCAL, rollback and RESET apply); its named
 * prepared statements are prepared again on a connection that lacks them. While it keeps a
 * connection, the native relay carries its bytes and hands over only what pooling must see:
 * statements with a word of the pooling rules, named Parse and Close, fenced writes.
 *
 * Here: the session's phase (transaction-phase.ts) and when each step happens, and what it
 * relays in JavaScript. Keeping a connection between transactions is in lazy-release.ts, the
 * native relay's part while it is kept in kept-connection-relay.ts, the settings in
 * settings-replay.ts, the statements in statement-repreparation.ts; both byte streams are
 * framed by src/wire/message-framer.ts.
 */
export class TransactionSession {
  readonly closed: Promise<void>
  private markClosed!: () => void
  private current: TransactionPhase = 'idle'
  /** The connection held: set exactly while the phase is active. */
  private server: ServerConnection | null = null
  /** Copies of messages that arrived while no server connection was held. */
  private readonly waiting: Buffer[] = []
  /**
   * Messages for the held connection, written together once the client's chunk is framed: one
   * write per batch, not per message. They may be views of the client's reused read buffer.
   */
  private readonly batch: Buffer[] = []
  /** What the held connection still owes the client, and which of its answers are pgfence's. */
  private readonly answers = new AnswerLedger((status) => this.requests.readyForQuery(status))
  private touched = false
  private readonly statements = new ClientStatements(
    (message) => this.inject(message),
    (message) => this.batch.push(message),
  )
  private readonly settings: Map<string, string>
  /** Settings read back from the last connection (phase settling): the next one waits for them. */
  private settled: Promise<void> = Promise.resolve()
  /**
   * Made when JavaScript first relays (framers): a session lent in C that the native relay
   * carries to its end never needs them.
   */
  private madeFramer: MessageFramer | null = null
  /** Frames the held connection's bytes into whole messages (copied only when split). */
  private madeServerFramer: MessageFramer | null = null
  /**
   * The server's messages framed out of one read, for the client: written together once the
   * read is framed. They may be views of the server's reused read buffer.
   */
  private readonly toClient: Buffer[] = []
  /** While a read is framed: a ReadyForQuery in it ended a transaction (acted on after it). */
  private transactionOver = false
  /** Transactions ended so far (server connection given back). */
  private transactions = 0
  /** The connection the client gave back last with its settings as they came, if it did. */
  private lastServer: ServerConnection | null = null
  /** Set by closeWhenIdle: sent once the client holds no server connection. */
  private closingWhenIdle: PgError | null = null
  /** The native relay's part: it carries the session while the client keeps its connection. */
  private readonly kept: KeptConnectionRelay
  /** Keeps the connection between transactions while no other client waits for one. */
  private readonly lazyRelease: LazyRelease
  private readonly maintenance: MaintenanceLog
  /** The client's requests as the client sees them, for the query and idle timeouts. */
  private readonly requests = new RequestTracker()
  /** A NoticeResponse became an 08007: the CommandComplete right after it is dropped. */
  private dropCompletion = false
  /** The backend said it terminates (its 08007 was FATAL): its close is no news to the client. */
  private backendEnding = false

  constructor(
    private readonly connection: ClientConnection,
    private readonly options: TransactionSessionOptions,
  ) {
    this.closed = new Promise((resolve) => (this.markClosed = resolve))
    this.settings = settingsByName(options.settings)
    this.maintenance = new MaintenanceLog(options.logger, new Map(options.settings))
    this.kept = new KeptConnectionRelay({
      client: () => connection.socket,
      clientAsItIs: () => connection.socketOrDescriptor(),
      writeClient: (bytes) => connection.write(bytes),
      statements: this.statements.parses,
      live: options.live,
      requests: this.requests,
      maintenance: this.maintenance,
      fromClient: (message) => this.handedOver(message),
      fromServer: (message) => this.relayed(message),
      onClose: (kind, detail, processId, secretKey) =>
        this.keptClosed(kind, detail, processId, secretKey),
      dropForeignStatements: () => {
        if (!this.statements.closeAllForeign(this.server!)) return false
        this.flush()
        return true
      },
    })
    this.lazyRelease = new LazyRelease({
      pool: options.pool,
      nativeRelay: options.nativeRelay,
      relay: this.kept,
      holding: () => this.current === 'active',
      server: () => this.server!,
      atRest: () => this.atRest(),
      release: () => this.releaseServer(),
    })
  }

  private get framer(): MessageFramer {
    return (this.madeFramer ??= new MessageFramer(
      {
        forward: () => {},
        intercept: (message) => this.fromClient(message),
        fail: (error) => this.fail(error),
      },
      this.options.live.current.config.limits.maxMessageBytes,
      FRONTEND_TYPES,
      FROM_CLIENT,
    ))
  }

  private get serverFramer(): MessageFramer {
    return (this.madeServerFramer ??= new MessageFramer(
      {
        forward: () => {},
        intercept: (message) => this.serverMessage(message),
        fail: (error) => this.fail(error),
      },
      Infinity,
      EVERY_TYPE,
      FROM_SERVER,
    ))
  }

  get phase(): TransactionPhase {
    return this.current
  }

  /** A method, not a field test: the session may end inside a call made after a test. */
  private ended(): boolean {
    return this.current === 'closed'
  }

  private moveTo(phase: TransactionPhase): void {
    this.current = nextPhase(this.current, phase)
  }

  start(leftover: Buffer): void {
    this.listen()
    if (leftover.length > 0) this.framer.push(leftover)
    this.connection.startReading()
  }

  /** A client waits for a connection: the one kept goes back at the end of the transaction. */
  giveBack(): void {
    this.lazyRelease.giveBack()
  }

  /**
   * Starts on the connection and the relay C lent the client at its login (lending in C): the
   * client was greeted already and keeps the connection, relayed natively, as lazy release
   * keeps one. Returns the relay's callbacks.
   */
  startLent(relay: NativeRelay, server: ServerConnection): RelayCallbacks {
    this.listen()
    this.moveTo('active')
    this.server = this.options.held.server = server
    server.attach(this.onServerBytes, this.serverClosed)
    this.lazyRelease.keptFromStart()
    return this.kept.adopt(relay, server)
  }

  /** The client's bytes come to the framer, whenever JavaScript reads them. */
  private listen(): void {
    this.connection.setReceiver((chunk) => {
      this.framer.push(chunk)
      this.flush()
      return true
    })
    this.connection.onClose(() => this.finish())
    this.connection.onError(() => {})
  }

  /**
   * Where the client's requests stand while it holds a server connection (the timeouts'
   * clock); null between transactions and while it waits for one (pool.waitTimeoutMs then).
   */
  progress(): RequestProgress | null {
    if (this.current !== 'active') return null
    return this.kept.progress() ?? this.requests.snapshot()
  }

  state(): SessionState {
    const native = this.kept.progress()
    const transactions = this.transactions + this.kept.transactions
    const idle = native
      ? native.outstanding === 0 && native.status === TransactionStatus.Idle
      : this.current !== 'waiting' &&
        this.answers.outstanding === 0 &&
        this.waiting.length === 0 &&
        (!this.server || this.requests.atRest)
    return { transactions, ready: true, idle, inTransaction: !idle }
  }

  get relayedNatively(): boolean {
    return this.kept.active
  }

  /** A config reload: the framer follows the new limits; statements read the rewriter anew. */
  reconfigure(): void {
    if (this.madeFramer)
      this.madeFramer.maxMessageBytes = this.options.live.current.config.limits.maxMessageBytes
    this.kept.reconfigure()
  }

  /** Closes the session now if it is idle, else once it is. */
  closeWhenIdle(error: PgError): void {
    this.closingWhenIdle = error
    if (this.state().idle || this.kept.closeWhenIdle()) this.terminate(error)
  }

  /**
   * Ends the session on pgfence's own account (shutdown, a timeout): the client learns what
   * became of its transaction; a backend still running the client's statement is cancelled and
   * its connection closed, never lent again. A statement that may commit is not cancelled while
   * it may wait for a synchronous standby (cancelUnlessCommitting): closing its connection does
   * not end the wait either.
   */
  async cut(reason: CutReason): Promise<void> {
    if (this.ended()) return
    const progress = this.progress()
    const error = cutError(reason, progress)
    this.options.logger.warn({ reason, code: error.code, ...progress }, 'ending session')
    const server = this.server
    const busy = server !== null && progress !== null && progress.outstanding > 0
    const key = busy ? server.backendKey : null
    const { cancelBackend, commitsMayWait } = this.options
    const cancelled = key
      ? cancelUnlessCommitting(
          progress,
          () => cancelBackend(key, server!),
          () => commitsMayWait(server!),
        )
      : undefined
    // The server's messages reach the client whole before the error.
    const atBoundary = this.kept.active ? this.kept.takeBack(true) : true
    if (atBoundary && this.connection.writable) this.connection.write(error.encode())
    this.finish(!busy)
    await cancelled
  }

  terminate(error?: PgError): void {
    const atBoundary = this.kept.active ? this.kept.takeBack(true) : this.answers.outstanding === 0
    if (error && this.connection.writable && atBoundary) this.connection.write(error.encode())
    this.finish()
  }

  /** One whole client message: a view valid only until the chunk it came in is framed. */
  private fromClient(message: Buffer): void {
    if (this.ended()) return
    if (message[0] === Frontend.Terminate) return this.finish()
    this.requests.clientMessage(message, 0, message.length)
    if (observedTypes.has(message[0]!)) {
      const idle = this.current !== 'waiting' && idleBefore(message, this.requests.snapshot())
      this.maintenance.observe(message, idle)
    }
    if (this.current === 'idle') this.checkoutIdle()
    if (this.current === 'active') return this.send(message)
    this.waiting.push(Buffer.from(message))
    if (this.current !== 'waiting') void this.checkout()
  }

  /** Takes an idle connection at once when the pool has one (no promise on the common path). */
  private checkoutIdle(): void {
    const server = this.options.pool.checkoutIdle()
    if (server) this.hold(server)
  }

  private async checkout(): Promise<void> {
    this.moveTo('waiting')
    let server: ServerConnection
    try {
      await this.settled
      server = await this.options.pool.checkout(this.connection)
    } catch (err) {
      return this.fail(err instanceof PgError ? err : new PgError('08006', String(err)))
    }
    if (this.ended()) return this.options.pool.checkin(server)
    this.hold(server)
    for (const message of this.waiting.splice(0)) this.send(message)
    this.flush()
  }

  private hold(server: ServerConnection): void {
    this.moveTo('active')
    this.server = this.options.held.server = server
    // The query timeout counts from here: waiting for the connection has a timeout of its own.
    this.requests.serverBytes()
    server.attach(this.onServerBytes, this.serverClosed)
    const replay = replayStatement(server, this.settings)
    if (replay) {
      this.answers.ownRequest()
      this.batch.push(query(replay))
    }
  }

  /** Writes the batch to the held connection, copied once (its views are of a reused buffer). */
  private flush(): void {
    const batch = this.batch
    if (batch.length === 0 || !this.server) return
    const bytes = batch.length === 1 ? Buffer.from(batch[0]!) : Buffer.concat(batch)
    batch.length = 0
    this.server.socket.write(bytes)
  }

  private send(message: Buffer): void {
    const server = this.server!
    switch (message[0]) {
      case Frontend.Query:
        this.answers.request()
        this.batch.push(this.statement(message, 5))
        break
      case Frontend.Parse: {
        const name = readCString(message, HEADER_BYTES)?.text ?? ''
        const replaces = name !== '' && server.prepared.has(name)
        const parse = this.parse(message, name)
        if (replaces) this.inject(closeStatement(name))
        this.answers.completion(false)
        this.batch.push(parse)
        break
      }
      case Frontend.Bind: {
        const portal = readCString(message, 5)
        this.statements.ensurePrepared(
          server,
          portal ? readCString(message, portal.next)?.text : undefined,
        )
        this.batch.push(message)
        break
      }
      case Frontend.Describe:
        if (message[5] === STATEMENT_TARGET)
          this.statements.ensurePrepared(server, readCString(message, 6)?.text)
        this.batch.push(message)
        break
      case Frontend.Close:
        this.statements.closed(server, message)
        this.answers.completion(false)
        this.batch.push(message)
        break
      case Frontend.Sync:
        this.answers.sync()
        this.batch.push(message)
        break
      case Frontend.FunctionCall:
        this.answers.request()
        this.batch.push(message)
        break
      default:
        this.batch.push(message)
    }
  }

  /**
   * A Parse, as it goes to the server (`name` its statement's): a named one becomes the
   * client's statement, here and wherever its transactions land.
   */
  private parse(message: Buffer, name: string): Buffer {
    const parse = this.statement(message, HEADER_BYTES + Buffer.byteLength(name) + 1)
    if (name !== '') this.statements.made(this.server!, name, parse, message)
    return parse
  }

  /** pgfence's own Close or Parse, whose completion the client must not see. */
  private inject(message: Buffer): void {
    this.answers.completion(true)
    this.batch.push(message)
  }

  /** The Query or Parse to send: refused, or rewritten for fencing; its effects noted. */
  private statement(message: Buffer, textAt: number): Buffer {
    const end = message.indexOf(0, textAt)
    const bytes = message.subarray(textAt, end < 0 ? message.length : end)
    const effects = statementEffects(bytes.toString(encodingOf(bytes)))
    this.touched ||= effects.touchesSettings
    // SQL PREPARE shares the protocol's namespace: another client's statement of the name goes.
    if (effects.prepares) this.statements.closeForeign(this.server!, effects.prepares)
    this.statements.forget(this.server!, effects.forgets)
    if (effects.refused)
      return this.replaceText(message, textAt, end, refusalStatement(effects.refused))
    const rewriter = this.options.live.current.rewriter
    return rewriter ? interceptStatement(message, this.maintenance.rewriterFor(rewriter)) : message
  }

  private replaceText(message: Buffer, textAt: number, end: number, text: string): Buffer {
    const body = message.subarray(5, textAt)
    const tail = message[0] === Frontend.Parse ? Buffer.from([0, 0]) : Buffer.alloc(0)
    return typedMessage(
      message[0]!,
      body,
      Buffer.from(`${text}\0`, 'utf8'),
      end < 0 ? Buffer.alloc(0) : tail,
    )
  }

  private readonly onServerBytes = (chunk: Buffer): boolean => this.fromServer(chunk)

  /** One read of the held connection: its whole messages go to the client in one write. */
  private fromServer(chunk: Buffer): boolean {
    if (this.ended()) return true
    this.requests.serverBytes()
    this.serverFramer.push(chunk)
    const out = this.toClient
    if (out.length > 0 && !this.ended())
      this.connection.write(out.length === 1 ? Buffer.from(out[0]!) : Buffer.concat(out))
    out.length = 0
    const transactionOver = this.transactionOver
    this.transactionOver = false
    if (transactionOver && !this.ended()) this.betweenTransactions()
    return true
  }

  /** One whole server message: a view valid only until the read it came in is written. */
  private serverMessage(message: Buffer): void {
    if (this.ended()) return
    const dropped = this.dropCompletion && message[0] === Backend.CommandComplete
    this.dropCompletion = false
    if (dropped || !this.answers.keep(message)) return
    const relayed = this.relayed(message)
    this.dropCompletion = message[0] === Backend.NoticeResponse && relayed !== message
    this.toClient.push(relayed)
    // Between transactions, unless the client has already begun the next (Parse ... Flush).
    if (
      message[0] === Backend.ReadyForQuery &&
      this.answers.outstanding === 0 &&
      this.requests.atRest
    )
      this.transactionOver = true
  }

  /**
   * As without pooling: rejections counted, logged and readable; SQL lexed as pgfence does. The
   * refusals, too, reach the client without the CONTEXT of the statement that raised them.
   */
  private relayed(message: Buffer): Buffer {
    const { logger, onRejection, live } = this.options
    if (message[0] === Backend.ErrorResponse) {
      const fields = decodeErrorFields(message)
      const replaced =
        readableRefusal(message, fields) ??
        onServerError(message, fields, logger, onRejection, live.current.config.fencing)
      return replaced ?? message
    }
    if (message[0] === Backend.NoticeResponse) return this.noticeRelayed(message)
    if (message[0] === Backend.ParameterStatus && live.current.rewriter) {
      const refusal = parameterRefusal(message)
      if (refusal) this.fail(refusal)
    }
    return message
  }

  /** A COMMIT whose wait for the synchronous standby was cancelled is told 08007. */
  private noticeRelayed(message: Buffer): Buffer {
    const unknown = unknownCommit(message)
    if (!unknown) return message
    this.options.logger.warn({ code: unknown.code, detail: unknown.detail }, unknown.message)
    this.backendEnding ||= unknown.severity === 'FATAL'
    return unknown.encode()
  }

  /**
   * A transaction is over: the connection goes back, or stays (lazy-release.ts). After
   * `touched`, settings are read back and reset now: a session SET lasts its transaction.
   */
  private betweenTransactions(): void {
    this.transactions++
    this.lazyRelease.transactionEnded(!this.touched && !this.closingWhenIdle)
  }

  /** The JavaScript relay stands between transactions: nothing half sent, expected or queued. */
  private atRest(): boolean {
    return (
      this.answers.settled &&
      this.waiting.length === 0 &&
      this.batch.length === 0 &&
      (this.madeServerFramer?.atBoundary() ?? true) &&
      (this.madeFramer?.atBoundary() ?? true) &&
      this.requests.atRest
    )
  }

  /** The connection goes back, after reading settings the client may have changed. */
  private releaseServer(): void {
    const server = this.server!
    this.server = this.options.held.server = null
    this.lazyRelease.released(server)
    server.detach()
    this.lastServer = this.touched ? null : server
    if (!this.touched) {
      this.moveTo('idle')
      this.options.pool.checkin(server)
    } else {
      this.touched = false
      this.moveTo('settling')
      this.settled = this.readSettings(server).finally(() => {
        if (this.current === 'settling') this.moveTo('idle')
      })
    }
    if (this.closingWhenIdle && this.waiting.length === 0)
      return this.terminate(this.closingWhenIdle)
    if (this.waiting.length > 0 && this.current !== 'waiting') void this.checkout()
  }

  /** Reads the tracked settings back (settings-replay.ts); the connection goes back reset. */
  private async readSettings(server: ServerConnection): Promise<void> {
    try {
      await readBackSettings(server, this.options.trackedSettings(), this.settings)
      this.options.pool.checkin(server)
    } catch (err) {
      this.options.logger.warn({ err: (err as Error).message }, 'could not read session settings')
      this.options.pool.release(server, (s, done) =>
        s.reset(true, this.options.resetTimeoutMs, null, done),
      )
    }
  }

  private readonly serverClosed = (): void => {
    if (this.backendEnding) return this.finish(false)
    this.terminate(new PgError('08006', 'server closed the connection unexpectedly'))
  }

  private fail(error: PgError): void {
    if (this.kept.active) this.kept.takeBack(true)
    if (this.connection.writable) this.connection.write(error.encode())
    this.finish()
  }

  /**
   * A message the native relay hands over (Query, Parse, Close; Bind under maintenance), noted
   * as the JavaScript relay notes what it sends: the bytes to send in its place.
   */
  private handedOver(message: Buffer): Buffer {
    const type = message[0]
    let out = message
    if (type === Frontend.Query) out = this.statement(message, HEADER_BYTES)
    else if (type === Frontend.Close) this.statements.closed(this.server!, message)
    else if (type === Frontend.Parse) {
      const name = readCString(message, HEADER_BYTES)?.text ?? ''
      // A name the client has already: PostgreSQL refuses it, as it would without pooling.
      out = this.statements.parses.has(name) ? message : this.parse(message, name)
    }
    // Settings are read back when the connection goes back: at the end of this transaction.
    if (this.touched) this.lazyRelease.giveBackAtEnd()
    return out
  }

  /**
   * The native relay stopped on its own: a socket closed, the client broke the protocol, idle.
   * A relay lent in C whose client said goodbye cleanly gives the cancel key for its connection's
   * next client (NativeRelayOptions.onClose).
   */
  private keptClosed(
    kind: RelayEnd,
    detail?: string,
    processId?: number,
    secretKey?: number,
  ): LinkEventHandler | void {
    if (kind === 'server') return this.serverClosed()
    if (kind === 'invalid') return this.fail(new PgError('08P01', detail ?? 'invalid message'))
    if (kind === 'goodbye' && processId !== undefined) {
      const onShelf = this.endOnShelf({ processId, secretKey: secretKey! })
      if (onShelf) return onShelf
    }
    if (kind === 'client' || kind === 'goodbye') return this.finish()
    if (this.closingWhenIdle) return this.terminate(this.closingWhenIdle)
    this.lazyRelease.idle()
  }

  /**
   * A client lent its connection in C said goodbye between transactions, its settings as it came:
   * the connection goes back on the shelf in C for a next client to get `key`, and the session
   * ends as finish() ends it, the relay's stop and the reset left to C. Returns what C tells of
   * the link's end from then on; null when the connection comes back through the pool.
   */
  private endOnShelf(key: BackendKey): LinkEventHandler | null {
    const server = this.server!
    if (this.touched || this.closingWhenIdle || !this.options.backOnShelf) return null
    const onShelf = this.options.backOnShelf(key)
    if (!onShelf) return null
    this.options.logger.debug('server connection back on the shelf in C')
    this.moveTo('closed')
    this.kept.handedToC()
    this.server = null
    this.lazyRelease.released(server)
    this.connection.end()
    this.markClosed()
    return onShelf
  }

  /**
   * Ends the session. A connection held goes back as at the end of a transaction when the client
   * left between transactions with its settings untouched (one kept by lazy release), as
   * PgBouncer gives connections back in transaction mode; else reset, or closed when not
   * `reusable` (its backend may still be running the client's statement).
   */
  private finish(reusable = true): void {
    if (this.ended()) return
    this.moveTo('closed')
    if (this.kept.active) this.kept.takeBack(true)
    const server = this.server
    if (server) {
      if (reusable) this.flush()
      const betweenTransactions = reusable && !this.touched && this.atRest()
      this.server = this.options.held.server = null
      this.lazyRelease.released(server)
      server.detach()
      const resetTimeoutMs = this.options.resetTimeoutMs
      if (betweenTransactions) {
        this.options.leaving?.(server)
        this.options.pool.checkin(server)
      } else
        this.options.pool.release(server, (s, done) =>
          reusable ? s.reset(true, resetTimeoutMs, null, done) : done(false),
        )
    } else if (this.lastServer && reusable) this.options.leaving?.(this.lastServer)
    this.connection.end()
    this.markClosed()
  }
}

/** A transaction-mode session for an authenticated client, greeted: start it, or startLent. */
export function transactionSession(
  connection: ClientConnection,
  pooled: GreetedClient,
  context: PoolingContext,
  options: {
    settings: SettingsHolder
    logger: LevelLogger
    onRejection: OnRejection
    nativeRelay: boolean
    cancelBackend(key: BackendKey, server: ServerConnection): Promise<void>
    commitsMayWait(server: ServerConnection): Promise<boolean>
    leaving?(server: ServerConnection): void
    backOnShelf?(key: BackendKey): LinkEventHandler | null
  },
): TransactionSession {
  const startup = pooled.settings.map(([name]) => name.toLowerCase())
  // pgfence.maintenance too: a session under it stays under it, as without pooling.
  const trackedSettings = () => {
    const { setting, resourceSetting } = options.settings.current.config.fencing
    return [
      ...new Set([setting, resourceSetting, maintenanceSetting, 'application_name', ...startup]),
    ]
  }
  const session = new TransactionSession(connection, {
    pool: pooled.pool,
    live: options.settings,
    logger: options.logger,
    trackedSettings,
    settings: pooled.settings,
    resetTimeoutMs: context.ownStatementTimeoutMs,
    held: pooled.held,
    nativeRelay: options.nativeRelay,
    onRejection: options.onRejection,
    cancelBackend: options.cancelBackend,
    commitsMayWait: options.commitsMayWait,
    leaving: options.leaving,
    backOnShelf: options.backOnShelf,
  })
  session.closed.then(() => context.cancelKeys.forget(pooled.cancelKey))
  return session
}
