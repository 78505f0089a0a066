import type net from 'node:net'
import type { CommentKeys } from '../rewrite/normalise.js'
import { nativeAddon, type CompiledRelayHandle } from '../native-addon.js'
import { FRONTEND_TYPE_CHARS, transactionStatus } from '../wire/protocol.js'
import { descriptorOf, stopReading } from '../net/socket-handle.js'
import { nativeTlsChannel, type NativeTlsChannel } from '../net/native-tls.js'
import { CARRIED_FIELDS, type CarriedProgress, type RequestProgress } from './request-progress.js'
import type { LinkEventHandler, ServerLinkHandle } from './server-link.js'
import type { LoginWatch } from '../client/client-connection.js'

/** What is left when a native relay stops: bytes not yet written, and where the server stands. */
export interface RelayRemainder {
  toClient: Buffer
  toServer: Buffer
  /** The server's bytes so far end at a message boundary: the proxy may add an error of its own. */
  serverAtBoundary: boolean
  /** The server connection's side, still watched in C, when stop was asked to keep it and could. */
  serverLink: ServerLinkHandle | undefined
}

export interface NativeRelay {
  /**
   * Stops relaying at once (idempotent); the sockets are the caller's again. `keepServer`: the
   * session ended cleanly on a pooled server connection, which C may go on watching (a
   * server link, src/native/server-link.h), when it is idle with nothing queued for it.
   */
  stop(keepServer?: boolean): RelayRemainder
  /** Where the session's requests stand, as the relay follows them (session-progress.c). */
  progress(): RequestProgress
  /** A config reload: applies from the next message. */
  update(settings: NativeRelaySettings): void
  /**
   * Whether the session is idle outside a transaction now (stop() may follow at once); if not,
   * onClose('idle') as soon as it is (shutdown, a pool wanting its server connection back).
   */
  closeWhenIdle(): boolean
}

/** What a config reload may change in a running relay. */
export interface NativeRelaySettings {
  maxMessageBytes: number
  /** Client message types handed to onMessage whole. */
  interceptTypes: string
  /**
   * Query and Parse messages are handed over only when they contain one of these lower-case
   * ASCII texts in any letter case (the rewriter's prefilter); absent: always.
   */
  statementNeedles?: readonly string[]
  /** Query templates shared by the proxy's sessions (createQueryCache). */
  queryCache?: NativeQueryCache
}

export interface NativeRelayOptions extends NativeRelaySettings {
  /** The client's TLS channel, when its socket is one's plaintext end (src/net/native-tls.ts). */
  clientTls?: NativeTlsChannel
  /** Likewise for the server's. */
  serverTls?: NativeTlsChannel
  /** A server link that waits: the relay takes its side over instead of the server socket's. */
  serverLink?: ServerLinkHandle
  /** The client's login in C, still watching its descriptor: the relay takes the watch over. */
  clientLogin?: LoginWatch
  /** Every message type a client may send, as a string of type bytes. */
  frontendTypes: string
  /**
   * The server connection outlives the client (a pool's): the client's Terminate stays with the
   * relay, which passes it on otherwise. The relay never hands a Terminate to onMessage.
   */
  keepsServer: boolean
  /** Where the session's requests stand when the relay takes it over. */
  progress: CarriedProgress
  /** Returns the bytes to send upstream in the message's place, or undefined to send it as is. */
  onMessage(message: Buffer): Buffer | undefined
  /**
   * A whole ErrorResponse or ParameterStatus from the server. For an ErrorResponse, which the
   * relay holds back until it is whole, it may return the bytes to send the client instead.
   */
  onServerMessage(message: Buffer): Buffer | undefined
  /**
   * A socket closed or failed ('client', 'server'; 'goodbye' once the client sent Terminate),
   * the client broke the protocol ('invalid'), or the session became idle after closeWhenIdle()
   * ('idle'). A relay lent in C whose client said goodbye cleanly (its session idle) also gives
   * the cancel key (`processId`, `secretKey`) its connection's next client would get if it went
   * back on the shelf in C (src/native/link-shelf.h), and the transactions it relayed:
   * returning a function lets it go there, the function then told of the link's end (as
   * linkReset's onEvent); otherwise the session has stopped the relay, as at any close.
   */
  onClose(
    kind: RelayEnd,
    detail?: string,
    processId?: number,
    secretKey?: number,
    transactions?: number,
  ): LinkEventHandler | void
}

/** Why a native relay stopped on its own (NativeRelayOptions.onClose). */
export type RelayEnd = 'client' | 'server' | 'goodbye' | 'invalid' | 'idle'

/** Needles the native relay can match byte for byte (ASCII case folding), else none. */
export const asciiOnly = (needles?: readonly string[]) =>
  needles?.every((needle) => Buffer.byteLength(needle) === needle.length) ? needles : undefined

/** An opaque handle on a native Query template cache. */
export type NativeQueryCache = { readonly brand: unique symbol }

/** What a template function gives the native cache for a normalised Query text. */
export type NativeTemplate = { parts: Buffer[]; holes: number[] } | null | undefined

/** The relay as the addon makes it (relay.c): the session's progress goes through the slots. */
interface CompiledRelay {
  stop(
    keepServer: boolean,
  ): [
    toClient: Buffer | undefined,
    toServer: Buffer | undefined,
    serverAtBoundary: boolean,
    serverLink: ServerLinkHandle | undefined,
  ]
  /** Writes the progress into the progress slots. */
  progress(): void
  update(settings: NativeRelaySettings): void
  closeWhenIdle(): boolean
}

interface NativeRelayModule {
  /**
   * Takes the session's progress so far from the progress slots. Positional, in
   * NativeRelayOptions' terms: a property read by name costs the addon a string made and looked
   * up each time, at every session's start.
   */
  relay(
    clientFd: number,
    serverFd: number,
    frontendTypes: NativeRelayOptions['frontendTypes'],
    maxMessageBytes: NativeRelayOptions['maxMessageBytes'],
    interceptTypes: NativeRelayOptions['interceptTypes'],
    statementNeedles: NativeRelayOptions['statementNeedles'],
    queryCache: NativeRelayOptions['queryCache'],
    keepsServer: NativeRelayOptions['keepsServer'],
    clientTls: NativeRelayOptions['clientTls'],
    serverTls: NativeRelayOptions['serverTls'],
    serverLink: NativeRelayOptions['serverLink'],
    clientLogin: NativeRelayOptions['clientLogin'],
    onMessage: NativeRelayOptions['onMessage'],
    onServerMessage: NativeRelayOptions['onServerMessage'],
    onClose: NativeRelayOptions['onClose'],
  ): CompiledRelay
  /**
   * Where the relay reads and writes a session's progress, not made an object of: the carried
   * fields in CARRIED_FIELDS order (the status as its byte, a flag as 0 or 1), then
   * transactions and quietMs.
   */
  relayProgressSlots(): Float64Array
  /**
   * A cache of Query rewrite templates by normalised text (src/rewrite/normalise.ts, reading
   * the values of `keys` in comments): on a miss the relay calls `templateFor` with the text,
   * which returns the template in the text's encoding, undefined (pass unchanged) or null (hand
   * each such Query to onMessage).
   */
  createQueryCache(
    capacity: number,
    keys: CommentKeys,
    templateFor: (key: Buffer) => NativeTemplate,
  ): NativeQueryCache
  /** Lookups in a Query template cache so far. */
  queryCacheStats(cache: NativeQueryCache): { hits: number; misses: number }
  /** The relay's normalisation of a Query text, or null when it leaves the text to onMessage. */
  normaliseQuery(text: Buffer, keys: CommentKeys): { key: Buffer; values: Buffer[] } | null
  /** Gives the C heap's free pages back to the system (glibc's malloc_trim). */
  releaseFreeMemory(): void
}

/** The compiled relay (src/native/relay.c), or null when it was not built. */
export const nativeRelayModule = nativeAddon as NativeRelayModule | null

const slots = nativeRelayModule?.relayProgressSlots() ?? new Float64Array(0)
/** Each carried field's slot; transactions and quietMs follow them. */
const SLOT = Object.fromEntries(CARRIED_FIELDS.map((field, i) => [field, i])) as Record<
  (typeof CARRIED_FIELDS)[number],
  number
>
const TRANSACTIONS_SLOT = CARRIED_FIELDS.length

function writeCarried(progress: CarriedProgress): void {
  slots[SLOT.outstanding] = progress.outstanding
  slots[SLOT.status] = progress.status.charCodeAt(0)
  slots[SLOT.mayCommit] = Number(progress.mayCommit)
  slots[SLOT.namedCommit] = Number(progress.namedCommit)
  slots[SLOT.unsynced] = Number(progress.unsynced)
}

function readProgress(): RequestProgress {
  return {
    outstanding: slots[SLOT.outstanding]!,
    status: transactionStatus(slots[SLOT.status]!),
    mayCommit: slots[SLOT.mayCommit] === 1,
    namedCommit: slots[SLOT.namedCommit] === 1,
    unsynced: slots[SLOT.unsynced] === 1,
    transactions: slots[TRANSACTIONS_SLOT]!,
    quietMs: slots[TRANSACTIONS_SLOT + 1]!,
  }
}

const NOTHING = Buffer.alloc(0)

/** A relay's callbacks in the order C takes them (NativeRelayOptions says what each does). */
export type RelayCallbacks = [
  onMessage: NativeRelayOptions['onMessage'],
  onServerMessage: NativeRelayOptions['onServerMessage'],
  onClose: NativeRelayOptions['onClose'],
]

/** A relay C made for a lent session (src/native/relay.h), as sessions use it. */
export const lentRelay = (compiled: CompiledRelayHandle): NativeRelay =>
  new Relay(compiled as unknown as CompiledRelay)

/** A running compiled relay, as sessions use it. */
class Relay implements NativeRelay {
  constructor(private readonly compiled: CompiledRelay) {}

  stop(keepServer = false): RelayRemainder {
    const [toClient, toServer, serverAtBoundary, serverLink] = this.compiled.stop(keepServer)
    return {
      toClient: toClient ?? NOTHING,
      toServer: toServer ?? NOTHING,
      serverAtBoundary,
      serverLink,
    }
  }

  progress(): RequestProgress {
    this.compiled.progress()
    return readProgress()
  }

  update(settings: NativeRelaySettings): void {
    this.compiled.update(settings)
  }

  closeWhenIdle(): boolean {
    return this.compiled.closeWhenIdle()
  }
}

/**
 * The descriptor of a socket that carries the session's plaintext with nothing buffered either
 * way, so that the relay can take its traffic over: a plain TCP socket, or the plaintext end of
 * a native TLS channel (the relay then borrows the TLS connection itself); null for Node's TLS
 * sockets and anything else.
 */
export function plainDescriptor(socket: net.Socket): number | null {
  if ('encrypted' in socket) return null
  const fd = descriptorOf(socket)
  return fd !== null && socket.writableLength === 0 && socket.readableLength === 0 ? fd : null
}

/** What a session gives the native relay beyond its two sockets and the settings in force. */
export type RelayHooks = Pick<
  NativeRelayOptions,
  'progress' | 'onMessage' | 'onServerMessage' | 'onClose'
>

/** How the sockets go on outside the relay. */
export interface SocketsAfterRelay {
  /** The client's socket reads again after the relay (transaction mode, between transactions). */
  clientReadsAgain?: boolean
  /** The server socket outlives the relay (a pooled connection) and keeps its read buffer. */
  serverReadsAgain?: boolean
  /** A pooled connection's server link, if C watches it (ServerConnection.takeLink). */
  takeServerLink?: () => ServerLinkHandle | null
  /** The login in C that watches a client given as a descriptor (ClientConnection). */
  takeLoginWatch?: () => LoginWatch | null
}

/**
 * Moves a session's two sockets to the native relay, their reads stopped, when both can go
 * (plainDescriptor); null when they cannot. The client may be a descriptor that no socket reads
 * (a client accepted for a login in C that never needed one). A server connection C watches
 * already (its socket stopped) goes over as its link.
 */
export function relaySession(
  client: net.Socket | number,
  server: net.Socket,
  settings: NativeRelaySettings,
  hooks: RelayHooks,
  {
    clientReadsAgain = false,
    serverReadsAgain = false,
    takeServerLink,
    takeLoginWatch,
  }: SocketsAfterRelay = {},
): NativeRelay | null {
  if (!nativeRelayModule) return null
  const clientSocket = typeof client === 'number' ? null : client
  const clientFd = typeof client === 'number' ? client : plainDescriptor(client)
  if (clientFd === null) return null
  const serverLink = takeServerLink?.() ?? undefined
  // A link that take() gave is one C watches: the relay reads its descriptor.
  const serverFd = serverLink ? -1 : plainDescriptor(server)
  if (serverFd === null) return null
  // Taken last: nothing after it may fail.
  const clientLogin = clientSocket ? undefined : (takeLoginWatch?.() ?? undefined)
  if (clientSocket) stopReading(clientSocket, !clientReadsAgain)
  if (!serverLink) stopReading(server, !serverReadsAgain)
  writeCarried(hooks.progress)
  const compiled = nativeRelayModule.relay(
    clientFd,
    serverFd,
    FRONTEND_TYPE_CHARS,
    settings.maxMessageBytes,
    settings.interceptTypes,
    settings.statementNeedles,
    settings.queryCache,
    serverReadsAgain,
    clientSocket ? nativeTlsChannel(clientSocket) : undefined,
    nativeTlsChannel(server),
    serverLink,
    clientLogin,
    hooks.onMessage,
    hooks.onServerMessage,
    hooks.onClose,
  )
  return new Relay(compiled)
}
