import type net from 'node:net'
import type { ServerConnection } from '../pool/server-connection.js'
import { RULE_WORDS } from '../pool/transaction-rules.js'
import { resumeReading } from '../net/socket-handle.js'
import type { SessionSettings, SettingsHolder } from '../fencing/live-settings.js'
import { idleBefore, observedTypes, type MaintenanceLog } from '../fencing/maintenance-log.js'
import {
  asciiOnly,
  relaySession,
  type NativeRelay,
  type NativeRelayOptions,
  type NativeRelaySettings,
  type RelayCallbacks,
} from '../relay/native-relay.js'
import type { RequestProgress, RequestTracker } from '../relay/request-progress.js'
import { interceptedTypeChars } from '../relay/intercepted-types.js'

/** What relaying a kept connection needs from its transaction session. */
export interface KeptConnectionOptions {
  /** The client's socket (made when first asked for: a session may never hand over). */
  client: () => net.Socket
  /** The client's socket if it has one, else its descriptor (none is made for it). */
  clientAsItIs: () => net.Socket | number
  /** Writes to the client: through its socket, or its descriptor while it has none. */
  writeClient(bytes: Buffer): void
  /** The client's named statements, as the session keeps them (read here, never changed). */
  statements: ReadonlyMap<string, Buffer>
  /** Limits and rewriter, read when the relay starts and at each reconfigure(). */
  live: SettingsHolder
  /**
   * The session's requests as its JavaScript relay follows them: the native relay goes on from
   * where they stand, and they from where it stopped.
   */
  requests: RequestTracker
  /** The session's log of maintenance statements, shared with its JavaScript relay. */
  maintenance: MaintenanceLog
  /**
   * A message the relay hands over (Query, Parse, Close; Bind too under maintenance), to be
   * noted as the session notes what it sends: returns the bytes to send in its place.
   */
  fromClient(message: Buffer): Buffer
  /** A whole ErrorResponse or ParameterStatus from the server: the bytes the client gets. */
  fromServer(message: Buffer): Buffer
  /** The relay stopped on its own: see NativeRelayOptions.onClose. */
  onClose: NativeRelayOptions['onClose']
  /**
   * Closes other clients' statements on the held connection (the session at rest); true when
   * there were any: the relay then waits for a later transaction's end.
   */
  dropForeignStatements(): boolean
}

/**
 * The native relay's part in transaction pooling: while a client keeps its server connection
 * between transactions, the native relay carries their bytes and hands over only what pooling
 * must see (statements with a word of the pooling rules, named Parse and Close, fenced writes;
 * every statement under maintenance). The session decides when to relay and when to take the
 * two sockets back.
 */
export class KeptConnectionRelay {
  private native: NativeRelay | null = null
  private server: net.Socket | null = null
  /** Transactions counted by the relays that stopped. */
  private stoppedTransactions = 0

  constructor(private readonly options: KeptConnectionOptions) {}

  /** Whether the native relay carries the session now. */
  get active(): boolean {
    return this.native !== null
  }

  /** Transactions the native relay has counted for the session, the current relay's included. */
  get transactions(): number {
    return this.stoppedTransactions + (this.native?.progress().transactions ?? 0)
  }

  /** Where the client's requests stand while relayed natively; null otherwise. */
  progress(): RequestProgress | null {
    return this.native ? this.native.progress() : null
  }

  /** A config reload: the relay follows the new limits and rewriter. */
  reconfigure(): void {
    this.native?.update(this.settings())
  }

  /**
   * Whether the relayed session is idle outside a transaction now (false when not relayed);
   * if not, onClose('idle') as soon as it is.
   */
  closeWhenIdle(): boolean {
    return this.native?.closeWhenIdle() ?? false
  }

  /**
   * Hands the client and its kept connection (the JavaScript relay at rest) to the native
   * relay, when both are plain TCP (or native TLS channels) and the connection holds exactly
   * the client's named statements (a Bind the relay passes on must find the client's own);
   * else the JavaScript relay carries on. Other clients' statements left on the connection are
   * closed first, so that the relay carries the client from a later transaction's end.
   */
  relay(server: ServerConnection): void {
    if (this.native || this.options.dropForeignStatements() || !this.holdsOwnStatements(server))
      return
    const [onMessage, onServerMessage, onClose] = this.callbacks()
    this.native = relaySession(
      this.options.client(),
      server.socket,
      this.settings(),
      { progress: this.options.requests.snapshot(), onMessage, onServerMessage, onClose },
      // Both read again when the session takes them back.
      { clientReadsAgain: true, serverReadsAgain: true },
    )
    if (this.native) this.server = server.socket
  }

  /**
   * Goes on with the relay C made when a login in C was lent the connection (lending in C),
   * the session idle: returns the relay's callbacks.
   */
  adopt(native: NativeRelay, server: ServerConnection): RelayCallbacks {
    this.native = native
    this.server = server.socket
    return this.callbacks()
  }

  private callbacks(): RelayCallbacks {
    return [
      (message) => this.fromClient(message),
      (message) => {
        const relayed = this.options.fromServer(message)
        return relayed === message ? undefined : relayed
      },
      this.options.onClose,
    ]
  }

  /** C stopped the relay and took the connection back onto its shelf (lending in C). */
  handedToC(): void {
    this.stoppedTransactions += this.native!.progress().transactions
    this.native = this.server = null
  }

  /**
   * Stops the native relay (it must be active): the JavaScript relay carries the session again,
   * or, `ending`, the session ends (the client is not read again: a client lent in C has no
   * socket to make for it). Returns whether the server's bytes so far end whole.
   */
  takeBack(ending = false): boolean {
    const native = this.native!
    const server = this.server!
    const { requests } = this.options
    const progress = native.progress()
    this.stoppedTransactions += progress.transactions
    requests.resume(progress)
    const { toClient, toServer, serverAtBoundary } = native.stop()
    this.native = this.server = null
    resumeReading(server)
    if (toServer.length > 0) server.write(toServer)
    const client = ending ? this.options.clientAsItIs() : this.options.client()
    if (typeof client !== 'number') resumeReading(client)
    if (toClient.length > 0) this.options.writeClient(toClient)
    return serverAtBoundary
  }

  private holdsOwnStatements(server: ServerConnection): boolean {
    const { statements } = this.options
    if (server.prepared.size !== statements.size) return false
    for (const [name, parse] of server.prepared) if (statements.get(name) !== parse) return false
    return true
  }

  private settings(): NativeRelaySettings {
    return keptRelaySettings(this.options.live.current, this.options.maintenance.on)
  }

  /** A message the native relay hands over: the bytes to send in its place, or undefined. */
  private fromClient(message: Buffer): Buffer | undefined {
    const type = message[0]!
    if (observedTypes.has(type)) this.observe(message)
    const out = this.options.fromClient(message)
    return out === message ? undefined : out
  }

  /** Logs the statement under maintenance; the relay shows every one while that is on. */
  private observe(message: Buffer): void {
    const native = this.native!
    const { maintenance } = this.options
    const was = maintenance.on
    maintenance.observe(message, idleBefore(message, native.progress()))
    if (maintenance.on !== was) native.update(this.settings())
  }
}

/**
 * The native relay's settings for a kept connection: what pooling must see is handed over, and
 * under `maintenance` every Query, Parse and Bind, to be logged.
 */
export function keptRelaySettings(
  current: SessionSettings,
  maintenance: boolean,
): NativeRelaySettings {
  const { rewriter, config } = current
  const fencing = rewriter ? asciiOnly(rewriter.prefilterNeedles) : []
  return {
    maxMessageBytes: config.limits.maxMessageBytes,
    interceptTypes: interceptedTypeChars({ statements: true, bind: maintenance, close: true }),
    statementNeedles: fencing && !maintenance ? [...RULE_WORDS, ...fencing] : undefined,
  }
}
