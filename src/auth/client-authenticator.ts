import { randomBytes } from 'node:crypto'
import { authentication, authenticationSasl, readCString } from '../wire/messages.js'
import {
  AUTH_MD5,
  AUTH_OK,
  AUTH_SASL_CONTINUE,
  AUTH_SASL_FINAL,
  Frontend,
} from '../wire/protocol.js'
import { md5Response, md5Salt, md5Secret, sameText } from './md5.js'
import {
  deriveKeys,
  mockVerifier,
  ScramError,
  ScramServerExchange,
  verifierFromPassword,
  type KeysFor,
  type ScramKeys,
  type ScramVerifier,
} from './scram.js'
import type { Secret } from './secret.js'
import { LoginFailure, loginFailureError } from './login-codes.js'

/** What pgfence may log in to PostgreSQL with on the client's behalf. */
export interface UpstreamCredentials {
  /** SCRAM keys for the server's salt: the client's own (recovered from its proof) or derived. */
  scram?: KeysFor
  /** The stored md5 secret (`md5…`). */
  md5?: string
  password?: string
}

/** A client pgfence has authenticated, and what it still owes the client. */
export interface ClientAuthentication {
  credentials: UpstreamCredentials
  /**
   * The last authentication messages (SASL final, AuthenticationOk), not sent yet: they go out
   * in one write with the greeting that follows them.
   */
  answer: Buffer
}

/** The client side of the connection while pgfence authenticates it. */
export interface Conversation {
  send(bytes: Buffer): void
  next(): Promise<Buffer>
}

const SCRAM = 'SCRAM-SHA-256'
/** AuthenticationSASL: the mechanisms offered. */
export const SASL_OFFER = authenticationSasl([SCRAM])
const AUTHENTICATION_OK = authentication(AUTH_OK)
/** Per process: the salts of mock verifiers are stable, so probing a user name tells nothing. */
const mockSecret = randomBytes(32)
/** Verifiers made from plaintext userlist passwords, made once each. */
const plainVerifiers = new Map<string, ScramVerifier>()

/**
 * Authenticates the client as `user` against its secret (null: unknown user, which fails the
 * same way as a wrong password, after a full exchange). AuthenticationOk is left to the caller
 * to send (`answer`).
 */
export function authenticateClient(
  conversation: Conversation,
  user: string,
  secret: Secret | null,
): Promise<ClientAuthentication> {
  return secret?.kind === 'md5'
    ? md5Exchange(conversation, user, secret.hash)
    : scramExchange(conversation, user, secret)
}

async function md5Exchange(
  conversation: Conversation,
  user: string,
  hash: string,
): Promise<ClientAuthentication> {
  const salt = md5Salt()
  conversation.send(authentication(AUTH_MD5, salt))
  const answer = passwordText(await expectPassword(conversation))
  if (!sameText(answer, md5Response(hash, salt)))
    throw loginFailureError(LoginFailure.WrongProof, user)
  return { credentials: { md5: hash }, answer: AUTHENTICATION_OK }
}

async function scramExchange(
  conversation: Conversation,
  user: string,
  secret: Secret | null,
): Promise<ClientAuthentication> {
  const verifier = verifierFor(user, secret)
  conversation.send(SASL_OFFER)
  const initial = await expectPassword(conversation)
  const mechanism = readCString(initial, 5)
  if (mechanism?.text !== SCRAM) throw loginFailureError(LoginFailure.Mechanism, user)
  const exchange = new ScramServerExchange(verifier)
  try {
    const first = exchange.start(initial.toString('utf8', mechanism.next + 4))
    conversation.send(authentication(AUTH_SASL_CONTINUE, Buffer.from(first)))
    const final = exchange.finish(passwordText(await expectPassword(conversation), false))
    if (!final || !secret) throw loginFailureError(LoginFailure.WrongProof, user)
    return scramAuthenticated(user, secret, final.keys, scramAnswer(final.serverFinal))
  } catch (err) {
    if (err instanceof ScramError) throw loginFailureError(err.failure, user)
    throw err
  }
}

/**
 * A client that proved it knows `secret` in a SCRAM exchange (here, or in the login in C), with
 * the keys its proof revealed and its answer (scramAnswer).
 */
export function scramAuthenticated(
  user: string,
  secret: Secret,
  keys: ScramKeys,
  answer: Buffer,
): ClientAuthentication {
  if (secret.kind === 'plain')
    return { credentials: plainCredentials(secret.password, user), answer }
  return { credentials: { scram: () => keys }, answer }
}

/** AuthenticationSASLFinal (server-final), then AuthenticationOk. */
export const scramAnswer = (serverFinal: string): Buffer =>
  Buffer.concat([authentication(AUTH_SASL_FINAL, Buffer.from(serverFinal)), AUTHENTICATION_OK])

/** The verifier to check a client against: its own, one made from a password, or a mock. */
export function verifierFor(user: string, secret: Secret | null): ScramVerifier {
  if (secret?.kind === 'scram') return secret.verifier
  if (secret?.kind !== 'plain') return mockVerifier(user, mockSecret)
  const key = `${user}\0${secret.password}`
  let verifier = plainVerifiers.get(key)
  if (!verifier) plainVerifiers.set(key, (verifier = verifierFromPassword(secret.password)))
  return verifier
}

/** A plaintext password logs in to PostgreSQL with whatever method it asks for. */
const plainCredentials = (password: string, user: string): UpstreamCredentials => ({
  password,
  md5: md5Secret(password, user),
  scram: (salt, iterations) => deriveKeys(password, salt, iterations),
})

async function expectPassword(conversation: Conversation): Promise<Buffer> {
  const message = await conversation.next()
  if (message[0] !== Frontend.Password)
    throw loginFailureError(LoginFailure.MessageType, '', message[0])
  return message
}

/** The body of a password message: NUL-terminated text, or raw bytes for SASL. */
const passwordText = (message: Buffer, terminated = true): string =>
  message.toString('utf8', 5, message.length - (terminated ? 1 : 0))
