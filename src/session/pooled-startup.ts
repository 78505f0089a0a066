import { authenticateConnection, type AuthenticatedConnection } from '../auth/connection-login.js'
import type { CredentialSource } from '../auth/credential-source.js'
import type { ClientConnection } from '../client/client-connection.js'
import type { CancelKeys } from '../pool/cancel-keys.js'
import type { Pool } from '../pool/pool.js'
import type { PoolRegistry } from '../pool/pool-registry.js'
import type { ServerConnection } from '../pool/server-connection.js'
import { sameName, settingsStatement, startupSettings } from '../pool/startup-settings.js'
import { PgError } from '../wire/error-response.js'
import type { LoginQuery } from '../server/login-query.js'
import { nonConformingStrings } from '../fencing/server-notices.js'
import type { PooledUpstream } from './session.js'
import type { LinkEventHandler } from '../relay/server-link.js'
import type { BackendKey } from '../wire/backend-key.js'
import { greeting, parameterStatuses } from '../wire/messages.js'
import { resetCarrying, settingsToApply } from './carried-settings.js'

export interface PoolingContext {
  /** Replaced by a reload. */
  credentials: CredentialSource
  pools: PoolRegistry
  cancelKeys: CancelKeys
  /**
   * How long the server may take to answer pgfence's own statements on a lent connection: a
   * reset between clients, a login's table-name check and settings.
   */
  ownStatementTimeoutMs: number
}

export interface PooledClient {
  pool: Pool
  /** The server connection lent (for the session in session mode; given back in transaction mode). */
  server: ServerConnection
  /** What the client holds now, for its cancel requests. */
  held: { server: ServerConnection | null }
  /** The client's startup settings. */
  settings: [string, string][]
  /** The client's own BackendKeyData (forget it when the client leaves). */
  cancelKey: BackendKey
  /** The client's bytes received after its last authentication message. */
  leftover: Buffer
  /**
   * Lent in C: at a clean goodbye the connection may go back on the shelf in C, the next client
   * to get `key` (LendingInC.keep); null when it comes back through the pool.
   */
  backOnShelf?: (key: BackendKey) => LinkEventHandler | null
}

export interface PooledStartOptions {
  /** Session mode keeps the connection (settings applied); transaction mode gives it back. */
  keepServer: boolean
  /** The database's table-name check, when one is due (as at a login without pooling). */
  nameCheck: (() => LoginQuery | null) | null
  /** Whether statements are fenced: then SQL must be lexed as pgfence does. */
  fencing: () => boolean
  /**
   * Told once the client has authenticated: what follows (a wait for a server connection, up to
   * pool.waitTimeoutMs; the login's own statements) is no longer the startup's.
   */
  authenticated: () => void
  /** The client authenticated already (by the login in C). */
  login?: AuthenticatedConnection
}

/**
 * Authenticates a client with pgfence's own credentials, lends it a server connection with the
 * client's startup settings applied, and greets it as PostgreSQL would, in one write: the last
 * authentication messages (AuthenticationOk), the server's ParameterStatus, pgfence's
 * BackendKeyData, ReadyForQuery.
 */
export async function startPooledClient(
  connection: ClientConnection,
  params: Map<string, string>,
  context: PoolingContext,
  { keepServer, nameCheck, fencing, authenticated, login: done }: PooledStartOptions,
): Promise<PooledClient> {
  const user = params.get('user')!
  const database = params.get('database') || user
  const settings = startupSettings(params)
  const login =
    done ?? (await authenticateConnection(connection, user, database, context.credentials))
  authenticated()
  const pool = context.pools.get(database, user)
  pool.useCredentials(login.credentials)
  const server = await pool.checkout()
  if (connection.closed) {
    pool.checkin(server)
    throw new Error('client left while waiting for a server connection')
  }
  // Before the greeting, so that the client's first statement meets the check's outcome.
  await runNameCheck(pool, server, nameCheck?.() ?? null, context.ownStatementTimeoutMs)
  // Session mode applies them on the connection it keeps; transaction mode replays them later.
  const applied = keepServer ? settingsToApply(server, settings) : settings
  const statuses = greetingStatuses(server.parameters, applied)
  const refusal = fencing() && nonConformingStrings(statuses.scs)
  if (refusal) {
    pool.checkin(server)
    throw refusal
  }
  const held = { server: keepServer ? server : null }
  const cancelKey = context.cancelKeys.issue(() => held.server?.backendKey ?? null)
  // Greeted first: the settings' round trip to the server overlaps the client's next one.
  connection.write(greeting(login.answer, statuses.encoded, cancelKey))
  const pooled = { pool, server, held, settings, cancelKey, leftover: login.leftover }
  if (!keepServer) {
    pool.checkin(server)
    return pooled
  }
  try {
    await applySettings(pool, server, applied, context.ownStatementTimeoutMs)
  } catch (err) {
    context.cancelKeys.forget(cancelKey)
    throw err
  }
  return pooled
}

/** Runs a due table-name check on a lent connection: once per database and interval. */
async function runNameCheck(
  pool: Pool,
  server: ServerConnection,
  check: LoginQuery | null,
  timeoutMs: number,
): Promise<void> {
  if (check === null) return
  try {
    check.done(await server.within(timeoutMs, (s) => s.response(check.sql)))
    pool.keepPresenceOn(server)
  } catch (err) {
    pool.release(server, (s, done) => s.reset(false, timeoutMs, null, done))
    throw new PgError('08006', (err as Error).message)
  }
}

async function applySettings(
  pool: Pool,
  server: ServerConnection,
  settings: [string, string][],
  timeoutMs: number,
): Promise<void> {
  const statement = settingsStatement(settings, server.parameters)
  if (!statement) return
  try {
    await server.within(timeoutMs, (s) => s.run(statement))
  } catch (err) {
    pool.release(server, (s, done) => s.reset(false, timeoutMs, null, done))
    throw err instanceof PgError ? err : new PgError('08006', (err as Error).message)
  }
}

/** A greeting's ParameterStatus messages, and the standard_conforming_strings they report. */
interface StatusSet {
  /** The parameters it encodes, in the server's order. */
  pairs: [string, string][]
  encoded: Buffer
  scs: string
}

/**
 * Status sets made so far, found again by content: the clients of a pool mostly get the same
 * one. Compared in place, with no key built per login.
 */
const statusSets: StatusSet[] = []
const STATUS_SETS_KEPT = 64

/** The server's ParameterStatus set as it will be once the client's settings are applied. */
export function greetingStatuses(
  parameters: Map<string, string>,
  settings: [string, string][],
): StatusSet {
  const known = statusSets.find((set) => sameStatuses(set.pairs, parameters, settings))
  if (known) return known
  const pairs = [...parameters].map(([name, value]): [string, string] => [
    name,
    appliedValue(settings, name, value),
  ])
  const scs = pairs.find(([name]) => name === 'standard_conforming_strings')?.[1] ?? 'on'
  if (statusSets.length >= STATUS_SETS_KEPT) statusSets.length = 0
  const set = { pairs, encoded: parameterStatuses(pairs), scs }
  statusSets.push(set)
  return set
}

/**
 * Whether `pairs` are the server's parameters, in order, with the client's settings applied.
 * Nothing is allocated per parameter: this runs at every login.
 */
function sameStatuses(
  pairs: [string, string][],
  parameters: Map<string, string>,
  settings: [string, string][],
): boolean {
  if (pairs.length !== parameters.size) return false
  let i = 0
  for (const name of parameters.keys()) {
    const [setName, setValue] = pairs[i++]!
    if (setName !== name || setValue !== appliedValue(settings, name, parameters.get(name)!))
      return false
  }
  return true
}

/** A parameter's value once the client's settings are applied: the last that names it wins. */
function appliedValue(settings: [string, string][], name: string, value: string): string {
  for (let i = settings.length - 1; i >= 0; i--) {
    const [setting, asked] = settings[i]!
    if (sameName(setting, name)) return asked
  }
  return value
}

/** The session's view of its server connection: given back to the pool (reset) at the end. */
export function lendServer(client: PooledClient, context: PoolingContext): PooledUpstream {
  const { pool, server } = client
  return {
    backendKey: server.backendKey,
    attach: (receiver) => server.attach(receiver),
    takeLink: () => server.takeLink(),
    keepOnShelf: (key) => {
      const onEnd = client.backOnShelf?.(key) ?? null
      if (onEnd) context.cancelKeys.forget(client.cancelKey)
      return onEnd
    },
    release: (clean, link) => {
      context.cancelKeys.forget(client.cancelKey)
      if (link) server.keepLink(link)
      else server.detach()
      const timeoutMs = context.ownStatementTimeoutMs
      pool.release(server, (s, done) => resetCarrying(s, client.settings, !clean, timeoutMs, done))
    },
  }
}
