import crypto, { createHash, createHmac, pbkdf2Sync, timingSafeEqual } from 'node:crypto'
import { randomBytes } from './random-block.js'
import { LoginFailure, scramFailureText } from './login-codes.js'

/**
 * SCRAM-SHA-256 (RFC 5802, RFC 7677) as PostgreSQL stores and speaks it. A verifier holds no
 * password: StoredKey = H(ClientKey) and ServerKey. A client's proof reveals its ClientKey,
 * which is enough (with ServerKey) to log in to a server that stores the same verifier.
 */

export interface ScramVerifier {
  iterations: number
  salt: Buffer
  storedKey: Buffer
  serverKey: Buffer
}

/** What a pooler needs to log in with SCRAM on a client's behalf. */
export interface ScramKeys {
  clientKey: Buffer
  serverKey: Buffer
}

type OneShotHash = (algorithm: string, data: Buffer, encoding: 'buffer') => Buffer
/** Node's one-shot digest (20.12 on): no Hash object per digest, a few µs less per login. */
const oneShot = (crypto as { hash?: OneShotHash }).hash

const sha256 = (bytes: Buffer): Buffer =>
  oneShot ? oneShot('sha256', bytes, 'buffer') : createHash('sha256').update(bytes).digest()

const SHA256_BLOCK = 64
const INNER_PAD = Buffer.alloc(SHA256_BLOCK, 0x36)
const OUTER_PAD = Buffer.alloc(SHA256_BLOCK, 0x5c)

/** HMAC-SHA-256 (RFC 2104) from two one-shot digests; keys here are 32 bytes, within a block. */
function hmac(key: Buffer, text: string): Buffer {
  if (!oneShot || key.length > SHA256_BLOCK) return createHmac('sha256', key).update(text).digest()
  const message = Buffer.from(text)
  const inner = Buffer.allocUnsafe(SHA256_BLOCK + message.length)
  const outer = Buffer.allocUnsafe(SHA256_BLOCK + 32)
  for (let i = 0; i < SHA256_BLOCK; i++) {
    const k = key[i] ?? 0
    inner[i] = INNER_PAD[i]! ^ k
    outer[i] = OUTER_PAD[i]! ^ k
  }
  message.copy(inner, SHA256_BLOCK)
  oneShot('sha256', inner, 'buffer').copy(outer, SHA256_BLOCK)
  return oneShot('sha256', outer, 'buffer')
}

const xor = (a: Buffer, b: Buffer): Buffer => {
  const out = Buffer.allocUnsafe(a.length)
  for (let i = 0; i < a.length; i++) out[i] = a[i]! ^ b[i]!
  return out
}

/** SaltedPassword, then ClientKey and ServerKey (the password is used as given: no SASLprep). */
export function deriveKeys(password: string, salt: Buffer, iterations: number) {
  const salted = pbkdf2Sync(password, salt, iterations, 32, 'sha256')
  return { clientKey: hmac(salted, 'Client Key'), serverKey: hmac(salted, 'Server Key') }
}

/** A verifier for a plaintext password, as PostgreSQL would make it (4096 iterations). */
export function verifierFromPassword(password: string, iterations = 4096): ScramVerifier {
  const salt = randomBytes(16)
  const { clientKey, serverKey } = deriveKeys(password, salt, iterations)
  return { iterations, salt, storedKey: sha256(clientKey), serverKey }
}

/** `SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>` (base64), or null. */
export function parseVerifier(text: string): ScramVerifier | null {
  const match =
    /^SCRAM-SHA-256\$(\d+):([A-Za-z0-9+/=]+)\$([A-Za-z0-9+/=]+):([A-Za-z0-9+/=]+)$/.exec(text)
  if (!match) return null
  const [storedKey, serverKey] = [match[3]!, match[4]!].map((b64) => Buffer.from(b64, 'base64'))
  if (storedKey!.length !== 32 || serverKey!.length !== 32) return null
  return {
    iterations: Number(match[1]),
    salt: Buffer.from(match[2]!, 'base64'),
    storedKey: storedKey!,
    serverKey: serverKey!,
  }
}

/** A plausible verifier for a user that does not exist, stable per user (no probing by salt). */
export function mockVerifier(user: string, secret: Buffer): ScramVerifier {
  const salt = hmac(secret, `salt:${user}`).subarray(0, 16)
  return { iterations: 4096, salt, storedKey: randomBytes(32), serverKey: randomBytes(32) }
}

/** The verifier's part of server-first, after the nonce (the login in C sends it too). */
export const serverFirstSuffix = ({ salt, iterations }: ScramVerifier): string =>
  `,s=${salt.toString('base64')},i=${iterations}`

/** `name=value` attributes of a SCRAM message. */
function attributes(message: string): Map<string, string> {
  const map = new Map<string, string>()
  for (const part of message.split(',')) {
    if (part.length >= 2 && part[1] === '=') map.set(part[0]!, part.slice(2))
  }
  return map
}

export class ScramError extends Error {
  constructor(readonly failure: LoginFailure) {
    super(scramFailureText(failure))
  }
}

/**
 * The server's side of one exchange: client-first → server-first, client-final → server-final.
 * A wrong proof fails at `finish`, never earlier, so an unknown user looks like a wrong password.
 */
export class ScramServerExchange {
  private clientFirstBare = ''
  private serverFirst = ''
  private gs2Header = ''
  private nonce = ''

  constructor(
    private readonly verifier: ScramVerifier,
    /** The server's part of the nonce (random; fixed only to replay RFC 7677's example). */
    private readonly serverNonce = randomBytes(18).toString('base64'),
  ) {}

  /** Answers the client-first message with the server-first message. */
  start(clientFirst: string): string {
    const match = /^([ny]),(a=[^,]*)?,(.*)$/.exec(clientFirst)
    if (!match) throw new ScramError(LoginFailure.ClientFirst)
    this.gs2Header = clientFirst.slice(0, clientFirst.length - match[3]!.length)
    this.clientFirstBare = match[3]!
    const clientNonce = attributes(this.clientFirstBare).get('r')
    if (!clientNonce || /[^\x21-\x7e]|,/.test(clientNonce)) throw new ScramError(LoginFailure.Nonce)
    this.nonce = clientNonce + this.serverNonce
    this.serverFirst = `r=${this.nonce}${serverFirstSuffix(this.verifier)}`
    return this.serverFirst
  }

  /**
   * Checks the client-final message: returns the server-final message and the client's keys,
   * or null when the proof is wrong.
   */
  finish(clientFinal: string): { serverFinal: string; keys: ScramKeys } | null {
    const withoutProof = clientFinal.replace(/,p=[^,]*$/, '')
    const attrs = attributes(clientFinal)
    if (attrs.get('c') !== Buffer.from(this.gs2Header).toString('base64'))
      throw new ScramError(LoginFailure.ChannelBinding)
    if (attrs.get('r') !== this.nonce) throw new ScramError(LoginFailure.NonceMismatch)
    const proof = Buffer.from(attrs.get('p') ?? '', 'base64')
    if (proof.length !== 32) throw new ScramError(LoginFailure.Proof)
    const authMessage = `${this.clientFirstBare},${this.serverFirst},${withoutProof}`
    const { storedKey, serverKey } = this.verifier
    const clientKey = xor(proof, hmac(storedKey, authMessage))
    if (!timingSafeEqual(sha256(clientKey), storedKey)) return null
    const serverFinal = `v=${hmac(serverKey, authMessage).toString('base64')}`
    return { serverFinal, keys: { clientKey, serverKey } }
  }
}

/** Gives the keys for the server's salt and iterations (fixed keys, or derived from a password). */
export type KeysFor = (salt: Buffer, iterations: number) => ScramKeys

/** The client's side, towards PostgreSQL, with keys rather than necessarily a password. */
export class ScramClientExchange {
  private readonly clientNonce = randomBytes(18).toString('base64')
  private readonly clientFirstBare = `n=,r=${this.clientNonce}`
  private authMessage = ''
  private serverKey: Buffer | null = null

  constructor(private readonly keysFor: KeysFor) {}

  first(): string {
    return `n,,${this.clientFirstBare}`
  }

  /** Answers the server-first message with the client-final message. */
  final(serverFirst: string): string {
    const attrs = attributes(serverFirst)
    const nonce = attrs.get('r')
    const iterations = Number(attrs.get('i'))
    if (!nonce?.startsWith(this.clientNonce) || !attrs.has('s') || !(iterations > 0))
      throw new Error('malformed SCRAM message (server-first)')
    const { clientKey, serverKey } = this.keysFor(
      Buffer.from(attrs.get('s')!, 'base64'),
      iterations,
    )
    this.serverKey = serverKey
    const withoutProof = `c=biws,r=${nonce}`
    this.authMessage = `${this.clientFirstBare},${serverFirst},${withoutProof}`
    const proof = xor(clientKey, hmac(sha256(clientKey), this.authMessage))
    return `${withoutProof},p=${proof.toString('base64')}`
  }

  /** Checks the server's signature: only a server that knows the verifier can make it. */
  verify(serverFinal: string): boolean {
    const signature = Buffer.from(attributes(serverFinal).get('v') ?? '', 'base64')
    const expected = hmac(this.serverKey ?? Buffer.alloc(32), this.authMessage)
    return signature.length === expected.length && timingSafeEqual(signature, expected)
  }
}
