import { authenticateConnection, type AuthenticatedConnection } from '../auth/connection-login.js'
import type { CredentialSource } from '../auth/credential-source.js'
import type { ClientConnection } from '../client/client-connection.js'
import type { CancelKeys } from '../pool/cancel-keys.js'
import { CLIENT_LEFT_QUEUE, type Pool } from '../pool/pool.js'
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

/** A transaction-mode client, greeted: it takes a server connection per transaction. */
export interface GreetedClient {
  pool: Pool
  /** The server connection the client holds now, for its cancel requests. */
  held: { server: ServerConnection | null }
  /** The client's startup settings. */
  settings: [string, string][]
  /** The client's own BackendKeyData (forget it when the client leaves). */
  cancelKey: BackendKey
  /** The client's bytes received after its last authentication message. */
  leftover: Buffer
}

/** A session-mode client, greeted, and the server connection lent to it for its session. */
export interface PooledClient extends GreetedClient {
  server: ServerConnection
  /**
   * Lent in C: at a clean goodbye the connection may go back on the shelf in C, the next client
   * to get `key` (LendingInC.keep); null when it comes back through the pool.
   */
  backOnShelf?: (key: BackendKey) => LinkEventHandler | null
}

export interface PooledStartOptions {
  /** The database's table-name check, when one is due (as at a login without pooling). */
  nameCheck: (() => LoginQuery | null) | null
  /** Whether nameCheck would give a check now (it changes nothing). */
  nameCheckDue: () => boolean
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

/** An authenticated client, its pool, and what its greeting needs. */
interface Arrival {
  connection: ClientConnection
  pool: Pool
  login: AuthenticatedConnection
  settings: [string, string][]
  context: PoolingContext
  options: PooledStartOptions
}

/**
 * Authenticates a client with pgfence's own credentials, lends it a server connection for its
 * session with the client's startup settings applied, and greets it as PostgreSQL would, in one
 * write: the last authentication messages (AuthenticationOk), the server's ParameterStatus,
 * pgfence's BackendKeyData, ReadyForQuery.
 */
export async function startSessionClient(
  connection: ClientConnection,
  params: Map<string, string>,
  context: PoolingContext,
  options: PooledStartOptions,
): Promise<PooledClient> {
  const arrival = await arrive(connection, params, context, options)
  const defaults = greetingDefaults(arrival)
  if (defaults) return lendAfterGreeting(arrival, greet(arrival, defaults, arrival.settings))
  const server = await lendForGreeting(arrival)
  // Session mode applies them on the connection it keeps.
  const applied = settingsToApply(server, arrival.settings)
  const greeted = greet(arrival, server.parameters, applied, server)
  greeted.client.held.server = server
  try {
    await applySettings(arrival.pool, server, applied, arrival.context.ownStatementTimeoutMs)
  } catch (err) {
    arrival.context.cancelKeys.forget(greeted.client.cancelKey)
    throw err
  }
  return lentFor(greeted, server)
}

/** Named in full, no spread: one hidden class for every login's (hidden-classes.test.ts). */
function lentFor(greeted: Greeted, server: ServerConnection): PooledClient {
  const { pool, held, settings, cancelKey, leftover } = greeted.client
  return { pool, server, held, settings, cancelKey, leftover }
}

/**
 * Authenticates a transaction-mode client and greets it: from the pool's server defaults, or
 * from a server connection lent for the greeting and given back at once (the pool's first
 * login, a table-name check due). Its settings are replayed on each connection it takes later.
 */
export async function startTransactionClient(
  connection: ClientConnection,
  params: Map<string, string>,
  context: PoolingContext,
  options: PooledStartOptions,
): Promise<GreetedClient> {
  const arrival = await arrive(connection, params, context, options)
  const defaults = greetingDefaults(arrival)
  if (defaults) return greet(arrival, defaults, arrival.settings).client
  const server = await lendForGreeting(arrival)
  const greeted = greet(arrival, server.parameters, arrival.settings, server)
  arrival.pool.checkin(server)
  return greeted.client
}

async function arrive(
  connection: ClientConnection,
  params: Map<string, string>,
  context: PoolingContext,
  options: PooledStartOptions,
): Promise<Arrival> {
  const user = params.get('user')!
  const database = params.get('database') || user
  const settings = startupSettings(params)
  const login =
    options.login ?? (await authenticateConnection(connection, user, database, context.credentials))
  options.authenticated()
  const pool = context.pools.get(database, user)
  pool.useCredentials(login.credentials)
  return { connection, pool, login, settings, context, options }
}

/**
 * The pool's server defaults to greet with before any connection is lent, as PgBouncer greets
 * from its cached parameters: a client then waits for a server connection only once it has
 * connected, so a client that connects while holding others (pgbench -C, one thread for many
 * clients) cannot stall the pool. Null for the pool's first login, or with a table-name check
 * due, which must run before the greeting so that the client's first statement meets its outcome.
 */
function greetingDefaults({ pool, options }: Arrival): ReadonlyMap<string, string> | null {
  return options.nameCheckDue() ? null : pool.serverDefaults
}

/** A server connection lent to the client, once one is free; it may have left meanwhile. */
async function lendTo({ connection, pool }: Arrival): Promise<ServerConnection> {
  const server = await pool.checkout(connection)
  if (connection.closed) {
    pool.checkin(server)
    throw new Error(CLIENT_LEFT_QUEUE)
  }
  return server
}

/** A server connection lent before the greeting, the table-name check run on it if due. */
async function lendForGreeting(arrival: Arrival): Promise<ServerConnection> {
  const { pool, context, options } = arrival
  const server = await lendTo(arrival)
  await runNameCheck(pool, server, options.nameCheck?.() ?? null, context.ownStatementTimeoutMs)
  return server
}

/**
 * Greets the client with `parameters` as they will be once `applied` are, and issues its cancel
 * key (it holds no connection yet). A fencing session is refused if standard_conforming_strings
 * would be off, the connection lent for the greeting (`lent`), if any, back in the pool.
 */
function greet(
  { connection, pool, login, settings, context, options }: Arrival,
  parameters: ReadonlyMap<string, string>,
  applied: [string, string][],
  lent: ServerConnection | null = null,
): Greeted {
  const statuses = greetingStatuses(parameters, applied)
  const refusal = options.fencing() && nonConformingStrings(statuses.scs)
  if (refusal) {
    if (lent) pool.checkin(lent)
    throw refusal
  }
  const held: GreetedClient['held'] = { server: null }
  const cancelKey = context.cancelKeys.issue(() => held.server?.backendKey ?? null)
  // Greeted first: the settings' round trip to the server overlaps the client's next one.
  connection.write(greeting(login.answer, statuses.encoded, cancelKey))
  return { client: { pool, held, settings, cancelKey, leftover: login.leftover }, statuses }
}

/** A client greeted, and the ParameterStatus set it was greeted with. */
interface Greeted {
  client: GreetedClient
  statuses: StatusSet
}

/**
 * Lends a client greeted from the pool's defaults its server connection (it may wait for one),
 * tells it each parameter the connection reports otherwise than its greeting did (a connection
 * to another server since), and applies its settings there.
 */
async function lendAfterGreeting(arrival: Arrival, greeted: Greeted): Promise<PooledClient> {
  const { connection, pool, settings, context, options } = arrival
  try {
    const server = await lendTo(arrival)
    greeted.client.held.server = server
    const applied = settingsToApply(server, settings)
    const statuses = greetingStatuses(server.parameters, applied)
    const changed = statusChanges(greeted.statuses.pairs, statuses.pairs)
    const refusal = changed && options.fencing() && nonConformingStrings(statuses.scs)
    if (refusal) {
      pool.checkin(server)
      throw refusal
    }
    if (changed) connection.write(changed)
    await applySettings(pool, server, applied, context.ownStatementTimeoutMs)
    return lentFor(greeted, server)
  } catch (err) {
    context.cancelKeys.forget(greeted.client.cancelKey)
    throw err
  }
}

/**
 * ParameterStatus messages for each parameter of `now` whose value `greeted` gave otherwise (or
 * not at all); null when there is none.
 */
export function statusChanges(greeted: [string, string][], now: [string, string][]): Buffer | null {
  if (greeted === now) return null
  const told = new Map(greeted)
  const changed = now.filter(([name, value]) => told.get(name) !== value)
  return changed.length === 0 ? null : parameterStatuses(changed)
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
  parameters: ReadonlyMap<string, string>,
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
  parameters: ReadonlyMap<string, string>,
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

/**
 * A client lent its connection in C said goodbye cleanly: the connection goes back on the shelf
 * in C for a next client to get `key`, and this client's own key is forgotten. Returns what C
 * tells of the link's end from then on; null when the connection comes back through the pool.
 */
export function goodbyeToShelf(
  client: Pick<PooledClient, 'backOnShelf' | 'cancelKey'>,
  context: PoolingContext,
  key: BackendKey,
): LinkEventHandler | null {
  const onEnd = client.backOnShelf?.(key) ?? null
  if (onEnd) context.cancelKeys.forget(client.cancelKey)
  return onEnd
}

/** The session's view of its server connection: given back to the pool (reset) at the end. */
export function lendServer(client: PooledClient, context: PoolingContext): PooledUpstream {
  const { pool, server } = client
  return {
    backendKey: server.backendKey,
    attach: (receiver) => server.attach(receiver),
    takeLink: () => server.takeLink(),
    keepOnShelf: (key) => goodbyeToShelf(client, context, key),
    release: (clean, link) => {
      context.cancelKeys.forget(client.cancelKey)
      if (link) server.keepLink(link)
      else server.detach()
      const timeoutMs = context.ownStatementTimeoutMs
      pool.release(server, (s, done) => resetCarrying(s, client.settings, !clean, timeoutMs, done))
    },
  }
}
