import { nativeAddon } from '../native-addon.js'
import { LoginFailure, LoginOutcome, loginFailureError } from './login-codes.js'
import { serverFirstSuffix, type ScramKeys, type ScramVerifier } from './scram.js'
import { decodeStartupPacket } from '../wire/startup-packet.js'
import type {
  ClientConnection,
  LoginWatch,
  LoginWatchControl,
} from '../client/client-connection.js'
import { tlsHandshakeFailed, type Handshake } from '../client/startup-handshake.js'
import type { AuthenticatedConnection } from './connection-login.js'
import { scramAuthenticated } from './client-authenticator.js'
import type { Secret } from './secret.js'
import type { NativeTlsContext } from '../net/native-tls.js'

/**
 * A client's login in C (src/native/client-login.c): the StartupMessage and the SCRAM exchange
 * are read and answered there, on the event loop, and JavaScript is called to choose the
 * verifier and once the client has authenticated. A login C does not take (TLS, a cancel
 * request, a user with no SCRAM secret or password in the userlist…) comes back with the bytes
 * read, for the JavaScript startup to go on from.
 */

/** A proxy's logins in C (clientLogins), for an acceptor to start logins with. */
export type Logins = { readonly brand: unique symbol }
/** A login under way; once authenticated, the watch a relay may take over (LoginWatch). */
type Login = LoginWatch

/**
 * What C reports at a login's end, its bytes in one Buffer (client-login.c says what they are
 * for each outcome).
 */
export type Report = [
  outcome: LoginOutcome,
  bytes: Buffer | undefined,
  failure: LoginFailure,
  detail: number,
]

interface NativeLoginModule {
  clientLogins(
    offer: Buffer,
    choose: (packet: Buffer) => Buffer | null,
    askedAlways: string,
  ): Logins
  loginsRemember(logins: Logins, on: boolean): void
  loginsTls(logins: Logins, context: NativeTlsContext): void
  loginStart(logins: Logins, fd: number, done: (...report: Report) => void): Login
  loginClose(login: Login): void
  loginRead(login: Login, onBytes: (chunk: Buffer | undefined) => boolean): void
}

const addon =
  typeof nativeAddon?.loginStart === 'function'
    ? (nativeAddon as unknown as NativeLoginModule)
    : null

/** An authenticated login's watch, closed or read through by its connection. */
export const watchControl: LoginWatchControl = {
  close: (login) => addon!.loginClose(login),
  read: (login, onBytes) => addon!.loginRead(login, onBytes),
}

/** Whether the addon was built with the login. */
export const nativeLoginAvailable = addon !== null

export type NativeLoginResult = (
  | { outcome: LoginOutcome.Fallback; rest: Buffer }
  | {
      outcome: LoginOutcome.Authenticated
      packet: Buffer
      keys: ScramKeys
      /** AuthenticationSASLFinal and AuthenticationOk, for the greeting to begin with. */
      answer: Buffer
      rest: Buffer
    }
  | { outcome: LoginOutcome.Refused; packet: Buffer; failure: LoginFailure; detail: number }
  | { outcome: LoginOutcome.Closed }
  | { outcome: LoginOutcome.TimedOut }
) & {
  /**
   * The client's login ran inside TLS (an accepted login in C, after 'S'): the plaintext end of
   * its TLS channel, where JavaScript goes on with the client.
   */
  inside?: ClientConnection
}

const KEY = 32

/** Where the protocol message that starts at `at` ends. */
const messageEnd = (bytes: Buffer, at: number): number => at + 1 + bytes.readUInt32BE(at + 1)

/** StoredKey, ServerKey and server-first's suffix, as C takes a verifier; made once each. */
const forC = new WeakMap<ScramVerifier, Buffer>()
function verifierForC(verifier: ScramVerifier): Buffer {
  let bytes = forC.get(verifier)
  if (!bytes) {
    const suffix = Buffer.from(serverFirstSuffix(verifier))
    bytes = Buffer.concat([verifier.storedKey, verifier.serverKey, suffix])
    forC.set(verifier, bytes)
  }
  return bytes
}

/** What a login's report says. */
export function loginResult(...[outcome, bytes, failure, detail]: Report): NativeLoginResult {
  if (outcome === LoginOutcome.TimedOut) return { outcome }
  if (bytes === undefined) return { outcome: LoginOutcome.Closed }
  switch (outcome) {
    case LoginOutcome.Fallback:
      return { outcome, rest: bytes }
    case LoginOutcome.Authenticated: {
      // The keys, the answer's two messages, the startup packet: each after its length.
      const answerEnd = messageEnd(bytes, messageEnd(bytes, 2 * KEY))
      const packetEnd = answerEnd + bytes.readUInt32BE(answerEnd)
      return {
        outcome,
        packet: bytes.subarray(answerEnd, packetEnd),
        keys: { clientKey: bytes.subarray(0, KEY), serverKey: bytes.subarray(KEY, 2 * KEY) },
        answer: bytes.subarray(2 * KEY, answerEnd),
        rest: bytes.subarray(packetEnd),
      }
    }
    case LoginOutcome.Refused:
      return { outcome, packet: bytes, failure, detail }
    default:
      return { outcome: LoginOutcome.Closed }
  }
}

/** Logins in C for one proxy, with its choice of verifier. */
export class NativeLogins {
  readonly logins: Logins

  /**
   * `choose`, given a startup-phase packet (any kind, not decoded): the verifier to check the
   * client against, a one-byte answer to send before reading the next packet (an encryption
   * request refused), or null for a login JavaScript runs. C remembers a verifier for the
   * user of a plain StartupMessage (protocol 3.0, no replication, a database other than
   * `askedAlways`) and a one-byte answer for the request, and answers the next such packet
   * alike without calling `choose`, until `remember(false)`.
   */
  constructor(
    offer: Buffer,
    choose: (packet: Buffer) => ScramVerifier | Buffer | null,
    askedAlways: string,
  ) {
    const chooseForC = (packet: Buffer) => {
      const choice = choose(packet)
      return choice === null || Buffer.isBuffer(choice) ? choice : verifierForC(choice)
    }
    this.logins = addon!.clientLogins(offer, chooseForC, askedAlways)
  }

  /**
   * Whether C may answer from what `choose` gave before; off, it forgets all. While logins are
   * refused before authentication the acceptor holds the memory (NativeAcceptor.room).
   */
  remember(on: boolean): void {
    addon!.loginsRemember(this.logins, on)
  }

  /**
   * Accepted logins take TLS up themselves: an SSLRequest that `choose` answers 'S' starts the
   * handshake in C with `context`, and the login goes on inside it (NativeLoginResult.inside).
   */
  takeTls(context: NativeTlsContext): void {
    addon!.loginsTls(this.logins, context)
  }

  /** Forgets what was remembered (the user list may have changed) and remembers again. */
  forget(): void {
    this.remember(false)
    this.remember(true)
  }

  /**
   * Runs a client's login on the connection's descriptor, which nothing else may read meanwhile.
   * Resolves with how it ended; a connection closed meanwhile (a startup timeout, a shutdown)
   * ends it Closed. An authenticated login goes on watching the descriptor, for a relay to take
   * over.
   */
  login(connection: ClientConnection): Promise<NativeLoginResult> {
    const fd = connection.descriptor()
    if (fd === null) return Promise.resolve({ outcome: LoginOutcome.Closed })
    return new Promise((resolve) => {
      const login = addon!.loginStart(this.logins, fd, (...args) => {
        stopWatching()
        if (args[0] === LoginOutcome.Authenticated) connection.keepLoginWatch(login, watchControl)
        resolve(loginResult(...args))
      })
      const stopWatching = connection.onClose(() => {
        addon!.loginClose(login)
        resolve({ outcome: LoginOutcome.Closed })
      })
    })
  }
}

/** A startup handshake, and the client's authentication when the login in C did it. */
export interface StartupAfterLogin {
  handshake: Handshake
  login?: AuthenticatedConnection
}

/**
 * Goes on from a login in C: an authenticated client's startup as if JavaScript had read it, a
 * refusal as the error to send, a fallback through `runStartup` with the bytes C read.
 * `secretOf`: the user's secret, which the verifier C checked was made from.
 */
export async function startupAfterNativeLogin(
  connection: ClientConnection,
  result: NativeLoginResult,
  runStartup: (received: Buffer) => Promise<Handshake>,
  secretOf: (user: string) => Secret | null,
): Promise<StartupAfterLogin> {
  switch (result.outcome) {
    case LoginOutcome.Fallback:
      return { handshake: await runStartup(result.rest) }
    case LoginOutcome.Closed:
    case LoginOutcome.TimedOut:
      throw CLIENT_LEFT
    case LoginOutcome.Refused:
      if (result.failure === LoginFailure.TlsHandshake)
        throw tlsHandshakeFailed(result.packet.toString('latin1'))
  }
  const packet = decodeStartupPacket(result.packet)
  if (packet.kind !== 'startup')
    throw new Error('the login in C took a packet that is no StartupMessage')
  const user = packet.params.get('user') ?? ''
  if (result.outcome === LoginOutcome.Refused)
    throw loginFailureError(result.failure, user, result.detail)
  const secret = secretOf(user)
  // A reload removed the user meanwhile: it is refused as PostgreSQL would refuse it now.
  if (!secret) throw loginFailureError(LoginFailure.WrongProof, user)
  const { credentials, answer } = scramAuthenticated(user, secret, result.keys, result.answer)
  return {
    handshake: { kind: 'startup', connection, packet, leftover: NOTHING },
    login: { credentials, answer, leftover: result.rest },
  }
}

const NOTHING = Buffer.alloc(0)
/** Made once: a client that connects and leaves (a health check) costs no stack trace. */
const CLIENT_LEFT = new Error('client closed the connection during authentication')
