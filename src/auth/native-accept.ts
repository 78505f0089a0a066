import type net from 'node:net'
import { nativeAddon, type CompiledRelayHandle, type ServerLinkHandle } from '../native-addon.js'
import { ClientConnection, type LoginWatch } from '../client/client-connection.js'
import { LoginOutcome } from './login-codes.js'
import { connectionInsideTls } from '../client/client-tls.js'
import type { NativeTlsChannel } from '../net/native-tls.js'
import {
  loginResult,
  watchControl,
  type Logins,
  type NativeLoginResult,
  type NativeLogins,
  type Report,
} from './native-login.js'

/**
 * Clients accepted in C (src/native/client-accept.c): the addon watches the listening socket
 * Node bound and starts each connection's login in C at once, so that JavaScript hears of a
 * connection only when its login ends (authenticated, fallen back, refused, or out of time). A
 * client that leaves during its login costs no JavaScript; the addon keeps the startup timeout
 * of the logins under way, and answers none from memory while more connections are open than
 * JavaScript gives room for.
 */

type Acceptor = { readonly brand: unique symbol }

type AcceptedReport = [
  ...Report,
  fd: number,
  login: LoginWatch | undefined,
  /** What is left of the startup timeout; LENT: how long ago the login was lent. */
  remainingMs: number,
  /** LENT: the relay C made, and the server link it was lent. */
  relay?: CompiledRelayHandle,
  link?: ServerLinkHandle,
  /** A login that ran inside TLS: its channel, and the channel's plaintext end (-1: none). */
  channel?: NativeTlsChannel,
  plaintextFd?: number,
]

interface AcceptModule {
  acceptClients(logins: Logins, onLogin: (...report: AcceptedReport) => unknown): Acceptor
  acceptorListen(acceptor: Acceptor, fd: number): number
  acceptorSettings(acceptor: Acceptor, timeoutMs: number, tellClosed: boolean): void
  acceptorRoom(acceptor: Acceptor, room: number): void
  acceptorPending(acceptor: Acceptor): number
  acceptorStop(acceptor: Acceptor): void
  acceptorCloseLogins(acceptor: Acceptor): void
  peerName(fd: number, out: { address?: string; port?: number }): number
}

const addon =
  typeof nativeAddon?.acceptClients === 'function' ? (nativeAddon as unknown as AcceptModule) : null

/** Whether the addon was built with accepting. */
export const nativeAcceptAvailable = addon !== null

/** A listening socket's handle, as far as it matters here: a TCP one can set no-delay. */
type ListenerHandle = { fd?: number; setNoDelay?: unknown }

/**
 * Where a login that ended in C goes: its connection (JavaScript's now), how it ended, and how
 * long its startup may still take.
 */
export type AcceptedLogin = (
  connection: ClientConnection,
  result: NativeLoginResult,
  remainingMs: number,
) => void

/**
 * Where a login lent a server connection in C goes (lending in C): its connection, the relay C
 * made and the link it relays; returns the relay's callbacks (RelayCallbacks), which C checks.
 */
export type LentLogin = (
  connection: ClientConnection,
  relay: CompiledRelayHandle,
  link: ServerLinkHandle,
  /** How long ago it was lent: C reports a lease when JavaScript must take part. */
  lentMsAgo: number,
  /** Its login ran inside TLS: the channel's plaintext end, where its session goes on. */
  inside?: ClientConnection,
) => unknown

export class NativeAcceptor {
  /** The listening descriptors the addon watches (duplicates of those Node bound). */
  readonly descriptors: number[] = []

  private constructor(private readonly acceptor: Acceptor) {}

  /**
   * Null when the addon was built without accepting. `lentClientsReadAgain`: a lent client's
   * descriptor is JavaScript's own duplicate (LinkShelf.lendingTo), read once the relay stops.
   */
  static create(
    logins: NativeLogins,
    onLogin: AcceptedLogin,
    onLent: LentLogin,
    lentClientsReadAgain = false,
  ): NativeAcceptor | null {
    if (!addon) return null
    const peerName = addon.peerName
    const acceptor = addon.acceptClients(
      logins.logins,
      (outcome, bytes, failure, detail, fd, login, remainingMs, relay, link, channel, plainFd) => {
        const lent = outcome === LoginOutcome.Lent
        const relayed = lent && !lentClientsReadAgain
        const connection = ClientConnection.onDescriptor(fd, peerName, relayed)
        const inside = channel && connectionInsideTls(connection, channel, plainFd!)
        if (lent) return onLent(connection, relay!, link!, remainingMs, inside)
        if (login) connection.keepLoginWatch(login, watchControl)
        onLogin(
          connection,
          { ...loginResult(outcome, bytes, failure, detail), inside },
          remainingMs,
        )
      },
    )
    return new NativeAcceptor(acceptor)
  }

  /**
   * Accepts for a bound TCP server from now on: the addon watches a duplicate of its socket, and
   * Node's own is closed (the socket goes on listening). A Unix-domain listener stays Node's:
   * false.
   */
  takeOver(server: net.Server): boolean {
    const handle = (server as unknown as { _handle?: ListenerHandle | null })._handle
    if (typeof handle?.fd !== 'number' || handle.fd < 0 || !handle.setNoDelay) return false
    this.descriptors.push(addon!.acceptorListen(this.acceptor, handle.fd))
    server.close()
    return true
  }

  /** For connections accepted from now on: their startup timeout; whether one that leaves during its login is told (for a debug line). */
  settings(timeoutMs: number, tellClosed: boolean): void {
    addon!.acceptorSettings(this.acceptor, timeoutMs, tellClosed)
  }

  /**
   * How many logins may be under way in C while C still answers from memory: past that (or below
   * 0, while shutting down) each is chosen by JavaScript, which refuses it.
   */
  room(room: number): void {
    addon!.acceptorRoom(this.acceptor, room)
  }

  /** Connections accepted whose login is under way in C. */
  pending(): number {
    return addon!.acceptorPending(this.acceptor)
  }

  /** Accepts no more; the logins under way go on. */
  stop(): void {
    addon!.acceptorStop(this.acceptor)
  }

  /** Closes every login under way (the end of a shutdown). */
  closeLogins(): void {
    addon!.acceptorCloseLogins(this.acceptor)
  }
}
