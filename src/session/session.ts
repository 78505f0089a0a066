import type { LevelLogger } from '../log.js'
import type { StatementRewriter } from '../rewrite/statement-rewriter.js'
import type { ClientConnection } from '../client/client-connection.js'
import type { UpstreamSocket } from '../server/upstream-connector.js'
import { readBackendKey, type BackendKey } from '../wire/backend-key.js'
import { AuthPhaseFilter } from '../wire/auth-filter.js'
import { BackendScanner } from '../wire/backend-scanner.js'
import { decodeErrorFields, PgError } from '../wire/error-response.js'
import { FROM_CLIENT, MessageFramer } from '../wire/message-framer.js'
import { Backend, Frontend, TransactionStatus } from '../wire/protocol.js'
import { idleBefore, MaintenanceLog } from '../fencing/maintenance-log.js'
import { interceptStatement } from '../relay/statement-interceptor.js'
import { interceptedTypeChars, interceptedTypeTable } from '../relay/intercepted-types.js'
import { RequestTracker, type RequestProgress } from '../relay/request-progress.js'
import { cancelUnlessCommitting, cutError, type CutReason } from './cut-outcome.js'
import { onServerError, parameterRefusal, unknownCommit } from '../fencing/server-notices.js'
import { withLoginQuery, type LoginPhase, type LoginQuery } from '../server/login-query.js'
import {
  asciiOnly,
  relaySession,
  type NativeRelay,
  type RelayCallbacks,
  type NativeRelaySettings,
} from '../relay/native-relay.js'
import { resumeReading } from '../net/socket-handle.js'
import type { SessionSettings, SettingsHolder } from '../fencing/live-settings.js'
import type { LinkEventHandler, ServerLinkHandle } from '../relay/server-link.js'

/** An empty write: its callback runs once everything queued before it is flushed. */
const FLUSH_MARK = Buffer.alloc(0)

/** `maintenance`: maintenance may be on, so every statement is logged. */
const interception = (rewriter: StatementRewriter | null | undefined, maintenance: boolean) => ({
  statements: Boolean(rewriter),
  bind: maintenance,
})

/** The native relay's settings for a session under `settings`; `maintenance`: it may be on. */
export function relaySettings(
  settings: SessionSettings,
  maintenance: boolean,
): NativeRelaySettings {
  const { rewriter, queryCache, config } = settings
  // Under maintenance every Query and Parse comes to JavaScript, to be logged.
  const statementNeedles = maintenance ? undefined : asciiOnly(rewriter?.prefilterNeedles)
  return {
    maxMessageBytes: config.limits.maxMessageBytes,
    interceptTypes: interceptedTypeChars(interception(rewriter, maintenance)),
    statementNeedles,
    // Only with needles: without them every Query would need a template, where rewriteQuery's
    // own prefilter spares most of them a parse.
    queryCache: (statementNeedles && queryCache) || undefined,
  }
}

export interface SessionOptions {
  /** Rewriter and limits, read at each statement: a config reload swaps them. */
  settings: SettingsHolder
  logger: LevelLogger
  /** Called once the server's first ReadyForQuery reached the client (a session that logs in). */
  onReady?: () => void
  /** Both legs use TLS with the same certificate, so SCRAM channel binding holds end to end. */
  keepChannelBinding: boolean
  /** Relay a plain-TCP session in native code once it is past authentication. */
  nativeRelay: boolean
  /** Aborted (with the 08006 to send) when the upstream login runs out of time. */
  loginDeadline: AbortSignal
  /** Cancels what the session's backend runs. */
  cancelBackend(key: BackendKey): Promise<void>
  /** Whether a COMMIT on the session's node may wait for a synchronous standby (commitsMayWait). */
  commitsMayWait(): Promise<boolean>
  /** Gives a query to run on the server connection before the client's first ReadyForQuery. */
  loginQuery?: (() => LoginQuery | null) | null
  /** A fencing rejection (PFxxx) the server returned, for metrics; `table` is schema.table. */
  onRejection(code: string, table: string): void
  /** The upstream is a pool's server connection, lent for this session (startPooled). */
  pooled?: PooledUpstream
  /** The client's startup parameters: they may turn pgfence.maintenance on. */
  startupParams?: Map<string, string>
}

/** Where a session stands, for metrics and the admin console. */
export interface SessionState {
  /** Transactions ended (ReadyForQuery idle), single statements included. */
  transactions: number
  /** Past authentication, relaying statements. */
  ready: boolean
  /** Idle outside a transaction block, nothing outstanding. */
  idle: boolean
  inTransaction: boolean
}

/** A pool's server connection, already logged in, lent to one session. */
export interface PooledUpstream {
  /** The server connection's own BackendKeyData, to cancel what it runs. */
  backendKey: BackendKey
  /** Routes the server's bytes to the session (its socket reads again). */
  attach(receiver: (chunk: Buffer) => boolean): void
  /** The connection's server link, when C watches it: the native relay takes it over. */
  takeLink(): ServerLinkHandle | null
  /**
   * Gives the connection back; `clean`: the client said goodbye and nothing was cut. `link`:
   * the native relay kept watching the connection, for the reset to go out from C.
   */
  release(clean: boolean, link?: ServerLinkHandle): void
  /**
   * A session lent in C said goodbye cleanly: its connection goes back on the shelf in C, the
   * next client to get `key`; returns what the link tells of its end, or null when the connection
   * is to come back through release.
   */
  keepOnShelf(key: BackendKey): LinkEventHandler | null
}

/**
 * One client connection and its own upstream connection (session mode). Client→server bytes
 * are framed so that Query and Parse texts can be rewritten; server→client bytes are forwarded
 * untouched, with their boundaries followed. Once authentication is over, a plain-TCP session
 * is handed to the native relay, which does the same in C and calls back only for the messages
 * the session inspects; on any close or error the session takes both sockets back.
 */
export class ProxySession {
  readonly closed: Promise<void>
  private markClosed!: () => void
  private ended = false
  private upstreamPaused = false
  private clientPaused = false
  /** Pieces framed out of one client chunk, sent together. */
  private readonly outgoing: Buffer[] = []
  /** The client said goodbye (Terminate): the server closing next is expected. */
  private terminating = false
  private ready = false
  private lastErrorFatal = false
  /**
   * Made when JavaScript first relays (framer, scanner): a session the native relay carries
   * from its start never needs them.
   */
  private madeFramer: MessageFramer | null = null
  private madeScanner: BackendScanner | null = null
  /** The server's login messages, read only by a session that logs in itself (start). */
  private authFilter: LoginPhase | null = null
  private native: NativeRelay | null = null
  /** Set when authentication ends, if the session may move to the native relay. */
  private handOverPending = false
  /** Requests in flight and the transaction status, while JavaScript relays the session. */
  private readonly requests = new RequestTracker()
  /** The server's BackendKeyData, to cancel its backend when pgfence cuts the session. */
  private backendKey: BackendKey | null = null
  /** Transactions the native relay counted before it stopped. */
  private nativeTransactions = 0
  /** Shutdown: the error to close with as soon as the session is idle. */
  private closingWhenIdle: PgError | null = null
  /** The pooled server connection's link, when the native relay kept it at a clean goodbye. */
  private keptLink: ServerLinkHandle | null = null
  private readonly maintenance: MaintenanceLog

  constructor(
    private readonly connection: ClientConnection,
    private readonly upstream: UpstreamSocket,
    private readonly options: SessionOptions,
  ) {
    this.closed = new Promise((resolve) => (this.markClosed = resolve))
    this.maintenance = new MaintenanceLog(options.logger, options.startupParams)
  }

  /** Frames the client's messages while JavaScript relays them, under the settings in force. */
  private get framer(): MessageFramer {
    return this.madeFramer ?? this.makeFramer()
  }

  private makeFramer(): MessageFramer {
    const { rewriter, config } = this.options.settings.current
    return (this.madeFramer = new MessageFramer(
      {
        forward: (bytes) => void this.outgoing.push(bytes),
        intercept: (message) => void this.outgoing.push(this.intercept(message)),
        fail: (error) => this.abort(error),
        started: (bytes, pos, end) => this.requests.clientMessage(bytes, pos, end),
      },
      config.limits.maxMessageBytes,
      interceptedTypeTable(interception(rewriter, this.maintenance.on)),
      FROM_CLIENT,
    ))
  }

  /** Both byte streams stand at a message boundary (JavaScript relayed none yet, or all whole). */
  private atBoundaries(): boolean {
    return (this.madeFramer?.atBoundary() ?? true) && (this.madeScanner?.atBoundary() ?? true)
  }

  /** Follows the server's message boundaries while JavaScript relays them. */
  private get scanner(): BackendScanner {
    return (this.madeScanner ??= new BackendScanner(
      (message) => this.onServerMessage(message),
      (status) => this.requests.readyForQuery(status),
      (error) => this.abort(error),
    ))
  }

  start(startupPacket: Buffer, leftover: Buffer): void {
    this.authFilter = withLoginQuery(
      new AuthPhaseFilter(this.options.keepChannelBinding),
      this.options.loginQuery ?? null,
      (bytes) => this.upstream.write(bytes),
    )
    this.listen()
    this.options.loginDeadline.addEventListener('abort', () => this.loginTimedOut(), { once: true })
    this.upstream.write(startupPacket)
    if (leftover.length > 0) this.fromClient(leftover)
    this.client.resume()
  }

  /** Starts relaying on a pooled server connection: the client has been greeted already. */
  startPooled(leftover: Buffer): void {
    this.listen()
    const pooled = this.options.pooled!
    this.backendKey = pooled.backendKey
    this.ready = true
    this.options.onReady?.()
    // Before the server's socket reads: a connection C watches goes to the relay as it is.
    const native = this.options.nativeRelay
    if (native && leftover.length === 0 && this.handOver()) return
    pooled.attach((chunk) => this.fromServer(chunk))
    if (leftover.length > 0) this.fromClient(leftover)
    if (!native || leftover.length === 0 || !this.handOver()) this.client.resume()
  }

  /**
   * Starts on the relay C made when it lent the client its pooled connection (lending in C):
   * the client was greeted already, the session is idle. Returns the relay's callbacks.
   */
  startLent(relay: NativeRelay): RelayCallbacks {
    this.listen()
    this.backendKey = this.options.pooled!.backendKey
    this.ready = true
    this.native = relay
    return this.relayCallbacks()
  }

  /**
   * The client's socket, for JavaScript's own relaying: a client the native relay carries from
   * its login in C on never needs one (ClientConnection).
   */
  private get client(): ClientConnection['socket'] {
    return this.connection.socket
  }

  private listen(): void {
    const { connection, upstream } = this
    upstream.setNoDelay?.(true)
    connection.setReceiver((chunk) => this.fromClient(chunk))
    connection.onClose(() => this.finish())
    upstream.on('close', this.onUpstreamClose)
    connection.onError((err) =>
      this.options.logger.debug({ err: err.message }, 'client socket error'),
    )
    upstream.on('error', this.onUpstreamError)
  }

  private readonly onUpstreamClose = () => this.upstreamClosed()
  private readonly onUpstreamError = (err: Error) =>
    this.options.logger.warn({ err: err.message }, 'upstream socket error')

  /** Closes both sides now (shutdown timeout, startup timeout). */
  terminate(error?: PgError): void {
    const atBoundary = this.native ? this.stopNative() : (this.madeScanner?.atBoundary() ?? true)
    if (error && atBoundary && this.connection.writable) this.connection.write(error.encode())
    this.finish()
  }

  /** Where the session's requests stand; null until it is past authentication. */
  progress(): RequestProgress | null {
    if (!this.ready || this.ended) return null
    return this.native ? this.native.progress() : this.requests.snapshot()
  }

  /**
   * Ends the session on pgfence's own account (shutdown deadline, a timeout): the client learns
   * what became of its transaction (src/session/cut-outcome.ts) and a backend still busy is
   * cancelled, unless it may be a COMMIT waiting for a synchronous standby. Resolves once the
   * cancel request was delivered.
   */
  async cut(reason: CutReason): Promise<void> {
    if (this.ended) return
    const progress = this.progress()
    const error = cutError(reason, progress)
    this.options.logger.warn({ reason, code: error.code, ...progress }, 'ending session')
    const key = this.backendKey
    const cancelled = key
      ? cancelUnlessCommitting(
          progress,
          () => this.options.cancelBackend(key),
          this.options.commitsMayWait,
        )
      : undefined
    this.terminate(error)
    await cancelled
  }

  /** A config reload: framing and the native relay follow the new settings from the next message. */
  reconfigure(): void {
    const { rewriter, config } = this.options.settings.current
    if (this.madeFramer) {
      this.madeFramer.maxMessageBytes = config.limits.maxMessageBytes
      this.madeFramer.interceptTypes = interceptedTypeTable(
        interception(rewriter, this.maintenance.on),
      )
    }
    this.native?.update(this.nativeSettings())
  }

  /** Shutdown: closes the session with `error` now if it is idle, else once it is. */
  closeWhenIdle(error: PgError): void {
    this.closingWhenIdle = error
    if (this.state().idle) return this.terminate(error)
    this.native?.closeWhenIdle()
  }

  state(): SessionState {
    const ownProgress = this.requests.snapshot()
    const progress = this.native?.progress() ?? ownProgress
    const inTransaction = progress.status !== TransactionStatus.Idle
    const atBoundaries = this.native !== null || this.atBoundaries()
    return {
      transactions:
        ownProgress.transactions +
        this.nativeTransactions +
        (this.native ? progress.transactions : 0),
      ready: this.ready,
      idle: this.ready && progress.outstanding === 0 && !inTransaction && atBoundaries,
      inTransaction,
    }
  }

  /** True once the session's bytes flow through the native relay. */
  get relayedNatively(): boolean {
    return this.native !== null
  }

  /**
   * The client's bytes, framed and sent upstream. Like the server's, they may be a view of a
   * reused read buffer: reading pauses while any of it is still queued.
   */
  private fromClient(chunk: Buffer): boolean {
    if (this.ended) return false
    this.framer.push(chunk)
    if (this.ended) return false
    this.sendOutgoing()
    if (this.upstream.writableLength === 0) return true
    this.clientPaused = true
    this.upstream.write(FLUSH_MARK, this.upstreamFlushed)
    return false
  }

  /** One write for one piece (the usual case), one writev for several. */
  private sendOutgoing(): void {
    const outgoing = this.outgoing
    if (outgoing.length === 1) this.upstream.write(outgoing[0]!)
    else if (outgoing.length > 1) {
      this.upstream.cork()
      for (const piece of outgoing) this.upstream.write(piece)
      this.upstream.uncork()
    }
    outgoing.length = 0
  }

  private readonly upstreamFlushed = (): void => {
    if (!this.clientPaused) return
    this.clientPaused = false
    this.client.resume()
  }

  /**
   * The server's bytes, forwarded as they are. The chunk may be a view of a reused read buffer,
   * so while any of it is still queued (not taken by the socket yet) reading pauses, until an
   * empty write queued behind it completes (writes complete in order).
   */
  fromServer(chunk: Buffer): boolean {
    if (this.ended) return false
    const session = this.ready ? chunk : this.passAuthPhase(chunk)
    if (session === null) return true
    if (session.length > 0) {
      this.requests.serverBytes()
      const forward = this.scanner.scan(session)
      if (this.ended) return false
      if (forward.length > 0) this.client.write(forward)
    }
    if (this.closingWhenIdle && this.state().idle) {
      this.terminate(this.closingWhenIdle)
      return false
    }
    if (this.handOverPending) {
      this.handOverPending = false
      if (this.handOver()) return false
    }
    if (this.client.writableLength === 0) return true
    this.upstreamPaused = true
    this.client.write(FLUSH_MARK, this.clientFlushed)
    return false
  }

  private readonly clientFlushed = (): void => {
    if (!this.upstreamPaused) return
    this.requests.serverBytes() // a slow client, not a silent server
    this.upstreamPaused = false
    this.upstream.resume()
  }

  /** Authentication messages (copied: they are few); returns the session's first bytes, if any. */
  private passAuthPhase(chunk: Buffer): Buffer | null {
    const { forward, rest } = this.authFilter!.push(chunk)
    for (const message of forward) {
      if (message[0] === Backend.ParameterStatus) this.onParameterStatus(message)
      else if (message[0] === Backend.BackendKeyData) this.backendKey = readBackendKey(message)
      else if (message[0] === Backend.ErrorResponse) this.lastErrorFatal = true // always FATAL here
    }
    if (this.ended) return null
    if (forward.length > 0) this.client.write(Buffer.concat(forward))
    if (rest === null) return null
    this.ready = true
    this.handOverPending = this.options.nativeRelay
    this.options.onReady?.()
    return rest
  }

  /**
   * Moves the session to the native relay, when both sockets are plain TCP or native TLS
   * channels (src/net/native-tls.ts) and both byte streams
   * stand at a message boundary with nothing buffered. Returns whether it did.
   */
  private handOver(): boolean {
    if (!this.atBoundaries()) return false
    const [onMessage, onServerMessage, onClose] = this.relayCallbacks()
    this.native = relaySession(
      this.connection.socketOrDescriptor(),
      this.upstream,
      this.nativeSettings(),
      { progress: this.requests.snapshot(), onMessage, onServerMessage, onClose },
      // A pooled server connection reads again after the session, or goes on in C.
      {
        serverReadsAgain: this.options.pooled !== undefined,
        takeServerLink: this.takeLink,
        takeLoginWatch: this.takeLoginWatch,
      },
    )
    if (!this.native) return false
    this.options.logger.debug('session relayed natively')
    return true
  }

  /** What the native relay calls back, in the relay's order. */
  private relayCallbacks(): RelayCallbacks {
    return [
      (message) => {
        const replacement = this.intercept(message)
        return replacement === message ? undefined : replacement
      },
      (message) => this.onServerMessage(message),
      (kind, detail, processId, secretKey) => {
        if (kind === 'server') return this.upstreamClosed()
        if (kind === 'invalid') return this.abort(new PgError('08P01', detail ?? 'invalid message'))
        if (kind === 'idle') return this.terminate(this.closingWhenIdle!)
        // The client said goodbye: the close that ended the relay (either side's) was expected.
        if (kind === 'goodbye') this.terminating = true
        this.options.logger.debug({ detail }, 'client connection closed')
        const onShelf = processId === undefined ? null : this.endOnShelf(processId, secretKey!)
        if (onShelf) return onShelf
        this.finish(true)
      },
    ]
  }

  private nativeSettings(): NativeRelaySettings {
    return relaySettings(this.options.settings.current, this.maintenance.on)
  }

  private readonly takeLink = () => this.options.pooled?.takeLink() ?? null
  private readonly takeLoginWatch = () => this.connection.takeLoginWatch()

  /**
   * Takes both sockets back from the native relay, with the bytes it had not written yet.
   * `keepServer`: the client left a pooled connection, which the relay leaves to C (keptLink)
   * when it is idle.
   */
  private stopNative(keepServer = false): boolean {
    const progress = this.native!.progress()
    this.nativeTransactions += progress.transactions
    this.requests.resume(progress)
    const { toClient, toServer, serverAtBoundary, serverLink } = this.native!.stop(keepServer)
    this.keptLink = serverLink ?? null
    this.native = null
    if (toClient.length > 0) this.connection.write(toClient)
    if (toServer.length > 0) this.upstream.write(toServer)
    return serverAtBoundary
  }

  /** The bytes to send upstream for one whole intercepted message. */
  private intercept(message: Buffer): Buffer {
    if (message[0] === Frontend.Bind) {
      this.observe(message)
      return message
    }
    if (message[0] !== Frontend.Terminate) return this.rewrite(message)
    this.terminating = true
    // A pooled server connection outlives the client: its goodbye stays with pgfence.
    return this.options.pooled ? Buffer.alloc(0) : message
  }

  /** Logs the statement under maintenance; reconfigures both relays when that switches. */
  private observe(message: Buffer): void {
    const was = this.maintenance.on
    const progress = this.native?.progress() ?? this.requests.snapshot()
    this.maintenance.observe(message, idleBefore(message, progress))
    if (this.maintenance.on !== was) this.reconfigure()
  }

  private rewrite(message: Buffer): Buffer {
    this.observe(message)
    // A reload may have removed every fenced table while this message was on its way.
    const rewriter = this.options.settings.current.rewriter
    if (!rewriter) return message
    try {
      return interceptStatement(message, this.maintenance.rewriterFor(rewriter))
    } catch (err) {
      this.options.logger.error({ err }, 'statement rewrite failed')
      this.abort(new PgError('XX000', 'pgfence could not rewrite the statement'))
      return Buffer.alloc(0)
    }
  }

  /** An ErrorResponse, NoticeResponse or ParameterStatus, read whole; maybe a replacement. */
  private onServerMessage(message: Buffer): Buffer | undefined {
    if (message[0] === Backend.ParameterStatus) return void this.onParameterStatus(message)
    if (message[0] === Backend.NoticeResponse) return this.onNotice(message)
    return this.onServerError(message)
  }

  /** A COMMIT whose wait for the synchronous standby was cancelled is told 08007. */
  private onNotice(message: Buffer): Buffer | undefined {
    const unknown = unknownCommit(message)
    if (!unknown) return undefined
    this.options.logger.warn({ code: unknown.code, detail: unknown.detail }, unknown.message)
    this.lastErrorFatal = unknown.severity === 'FATAL'
    return unknown.encode()
  }

  /** A fencing session is closed when the server stops lexing SQL as pgfence does. */
  private onParameterStatus(message: Buffer): void {
    if (!this.options.settings.current.rewriter) return
    const refusal = parameterRefusal(message)
    if (refusal) this.abort(refusal)
  }

  /** Logs a fencing rejection, and gives it back without pgfence's own CONTEXT lines. */
  private onServerError(message: Buffer): Buffer | undefined {
    const fields = decodeErrorFields(message)
    this.lastErrorFatal = fields.severity === 'FATAL' || fields.severity === 'PANIC'
    const { logger, onRejection, settings } = this.options
    return onServerError(message, fields, logger, onRejection, settings.current.config.fencing)
  }

  /** A protocol violation (by either side) or a refusal: tell the client why, then close both sides. */
  private abort(error: PgError): void {
    this.options.logger.info(
      { code: error.code, reason: error.message },
      'closing client connection',
    )
    this.terminate(error)
  }

  private upstreamClosed(): void {
    if (this.ended) return
    if (this.lastErrorFatal || this.terminating) return this.finish()
    if (this.ready) return void this.cut('upstreamLost')
    this.options.logger.warn('upstream connection closed during login')
    this.terminate(new PgError('08006', 'server closed the connection during login'))
  }

  private loginTimedOut(): void {
    if (this.ready || this.ended) return
    const error = this.options.loginDeadline.reason as PgError
    this.options.logger.warn({ reason: error.message }, 'upstream login timed out')
    this.terminate(error)
  }

  /**
   * A session lent in C said goodbye cleanly and its connection may go back on the shelf in C,
   * for a next client to get this cancel key: the session ends as finish() ends it, the relay's
   * stop and the reset left to C. Returns what C tells of the link's end from then on; null when
   * the connection comes back through the pool (finish).
   */
  private endOnShelf(processId: number, secretKey: number): LinkEventHandler | null {
    const onShelf = this.options.pooled!.keepOnShelf({ processId, secretKey })
    if (!onShelf) return null
    this.options.logger.debug('server connection back on the shelf in C')
    this.ended = true
    this.nativeTransactions += this.native!.progress().transactions
    this.native = null
    this.connection.end()
    this.stopListeningUpstream()
    this.markClosed()
    return onShelf
  }

  private stopListeningUpstream(): void {
    this.upstream.off('close', this.onUpstreamClose)
    this.upstream.off('error', this.onUpstreamError)
  }

  /**
   * Gives a pooled server connection back, with the session's listeners off: reading again, or
   * still watched in C when the relay kept it.
   */
  private returnUpstream(wasNative: boolean): void {
    this.stopListeningUpstream()
    const pooled = this.options.pooled!
    const link = this.keptLink
    this.keptLink = null
    if (link) return pooled.release(true, link)
    if (wasNative) resumeReading(this.upstream)
    pooled.release(this.terminating && (this.madeFramer?.atBoundary() ?? true))
  }

  /**
   * `clientLeft`: the client said goodbye or closed its end. A pooled connection the native
   * relay finds idle then stays in C for its reset, as after a Terminate: a client that
   * closes without one (its process gone, a driver's shortcut) leaves the server as clean.
   */
  private finish(clientLeft = false): void {
    if (this.ended) return
    this.ended = true
    const wasNative = this.native !== null
    const keepServer = (clientLeft || this.terminating) && this.options.pooled !== undefined
    if (this.native) this.stopNative(keepServer)
    this.connection.end()
    if (this.options.pooled) this.returnUpstream(wasNative)
    else this.upstream.destroy()
    this.markClosed()
  }
}
