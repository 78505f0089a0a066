import type { IdleLender, Pool } from '../pool/pool.js'
import type { ServerConnection } from '../pool/server-connection.js'
import type { HeldServerKey } from '../pool/cancel-keys.js'
import { startupSettings } from '../pool/startup-settings.js'
import type { BackendKey } from '../wire/backend-key.js'
import { greeting } from '../wire/messages.js'
import { FRONTEND_TYPE_CHARS } from '../wire/protocol.js'
import type { LinkShelf, LentRelaySettings } from '../relay/link-shelf.js'
import type { ServerLinkHandle } from '../relay/server-link.js'
import { startsInMaintenance } from '../fencing/maintenance-log.js'
import { nonConformingStrings } from '../fencing/server-notices.js'
import {
  settingsForDatabase,
  type SessionSettings,
  type SettingsHolder,
} from '../fencing/live-settings.js'
import { relaySettings } from './session.js'
import { carriesAlready, carryingReset } from './carried-settings.js'
import { greetingStatuses, type PooledClient, type PoolingContext } from './pooled-startup.js'
import { keptRelaySettings } from './kept-connection-relay.js'
import { sameSettings, settingsByName } from './settings-replay.js'

/** A pooled client's StartupMessage, and what the proxy reads from it once. */
export interface LoginProfile {
  /** The packet's bytes, which a login in C must match byte for byte to be lent. */
  packet: Buffer
  params: Map<string, string>
  database: string
  /** The startup settings a connection carries for such a client (carried-settings.ts). */
  settings: [string, string][]
  /** The settings in force for its database. */
  sessionSettings: SettingsHolder
  /** It may turn pgfence.maintenance on: its statements are logged, so it is never lent in C. */
  maintenance: boolean
  /** `settings` by lower-case name, as a transaction pool's connection notes those it applied. */
  settingsByName: ReadonlyMap<string, string>
}

/**
 * A connection on the shelf, with the key its client is to be greeted with; kept while a login
 * in C holds it (`out`), for it to come back with a new key.
 */
interface Shelved {
  pool: Pool
  link: ServerLinkHandle
  profile: LoginProfile
  cancelKey: BackendKey
  held: { server: ServerConnection | null }
  /** What the connection's cancel keys resolve to. */
  heldKey: HeldServerKey
  out: boolean
  /** Whether its reset in C takes the presence lock again (ServerConnection.holdsPresence). */
  presence: boolean
  /** The lender's generation when shelved: a reload makes a new one. */
  generation: number
}

const PROFILES_KEPT = 256
const NO_SETTINGS: [string, string][] = []
const NOTHING = Buffer.alloc(0)

/**
 * Lending in C: a session pool's idle connection that C watches (its reset answered in C) is
 * put on the shelf for the startup packet of the client it served last, since it carries that
 * client's settings; the next login in C with the same packet is then served on it without
 * JavaScript until its session starts (LinkShelf). A transaction pool's connection is shelved so
 * as the client that used it last leaves, when it carries that client's startup settings and
 * none of its statements; its next client keeps it, relayed natively (TransactionSession). Only what would have served that login at
 * once is shelved: the settings carried as asked, no table-name check due before it would be
 * lent (a time limit), the statuses acceptable to a fencing session, not under maintenance. The
 * pool asks for a connection back before lending or closing it (a change of primary closes
 * those to the old one so); a reload and a shutdown take them all back.
 *
 * C lends quietly: JavaScript hears of a login lent so only when its relay needs JavaScript, or
 * when it settles (settle: before a pool or the registry is read or changed, and before a cancel
 * key is looked up). Until then the pool counts the connection idle and on the shelf, which it is
 * again if the client says goodbye first: C then puts it back itself, with a new key for its next
 * client, and the return waits for the next settle.
 */
export class LendingInC implements IdleLender {
  private readonly shelved = new Map<ServerConnection, Shelved>()
  private readonly byLink = new Map<ServerLinkHandle, ServerConnection>()
  private readonly lastClient = new WeakMap<ServerConnection, LoginProfile>()
  private readonly profiles = new Map<string, LoginProfile>()
  private readonly relaySettings = new WeakMap<SessionSettings, LentRelaySettings>()
  private lending = true
  /** Counts reloads: a connection lent before one comes back through the pool. */
  private generation = 0

  constructor(
    private readonly shelf: LinkShelf,
    private readonly pooling: PoolingContext,
    private readonly settings: SettingsHolder,
    /** How long until the database's table-name check is due (TableNameChecks.dueInMs). */
    private readonly checkDueInMs: (database: string) => number,
    /** Counts the `transactions` of logins lent in C that left before JavaScript heard of them. */
    private readonly quietLogins: (transactions: number) => void,
    /**
     * The pools pool transactions: a connection is shelved as its last client leaves it between
     * transactions, and its next one keeps it, relayed natively, as lazy release keeps one.
     */
    private readonly transaction = false,
  ) {}

  /**
   * Brings JavaScript up to date with the logins lent in C quietly: the links they left back on
   * the shelf (with their new cancel keys), then each still under way, reported now (it becomes a
   * LentLogin). Called before the pools or the sessions are read or changed.
   */
  settle(): void {
    this.takeReturns()
    this.shelf.report()
  }

  /** A link back on the shelf quietly stays idle, its next client greeted with a new key. */
  takeReturns(): void {
    for (const { link, key, transactions } of this.shelf.returns()) {
      this.quietLogins(transactions)
      const server = link && this.byLink.get(link)
      const shelved = server && this.shelved.get(server)
      if (!shelved) continue
      this.pooling.cancelKeys.forget(shelved.cancelKey)
      this.pooling.cancelKeys.adopt(key, shelved.heldKey)
      shelved.cancelKey = key
      server.idleSince = Date.now()
    }
  }

  /** The profile of a client's StartupMessage (`params`, decoded from `packet`), made once. */
  profile(packet: Buffer, params: Map<string, string>): LoginProfile {
    const key = packet.toString('latin1')
    let profile = this.profiles.get(key)
    if (profile) return profile
    if (this.profiles.size >= PROFILES_KEPT) this.profiles.clear()
    const database = params.get('database') ?? params.get('user') ?? ''
    const settings = startupSettings(params)
    profile = {
      packet: Buffer.from(packet),
      params,
      database,
      settings,
      sessionSettings: settingsForDatabase(this.settings, database),
      maintenance: startsInMaintenance(params),
      settingsByName: settingsByName(settings),
    }
    this.profiles.set(key, profile)
    return profile
  }

  /** A client with `profile` holds `server`: at its next idle spell the connection is offered for it. */
  serves(server: ServerConnection, profile: LoginProfile): void {
    this.lastClient.set(server, profile)
  }

  /**
   * A transaction pool's client with `profile` leaves `server`, the connection it used last: held
   * still (offered as it comes back), or idle since it gave it back (offered now).
   */
  left(pool: Pool, server: ServerConnection, profile: LoginProfile): void {
    this.lastClient.set(server, profile)
    if (pool.holdsIdle(server)) this.offer(pool, server)
  }

  offer(pool: Pool, server: ServerConnection): void {
    const profile = this.lastClient.get(server)
    if (this.transaction) this.lastClient.delete(server)
    if (!this.lending || !profile || profile.maintenance || !server.alive) return
    const known = this.shelved.get(server)
    if (known && !known.out) return
    const link = this.transaction
      ? this.transactionLink(server, profile)
      : this.sessionLink(server, profile)
    if (!link) return
    const lendForMs = Math.min(this.checkDueInMs(profile.database), pool.lifetimeLeftMs(server))
    if (lendForMs <= 0) return
    const current = profile.sessionSettings.current
    const statuses = this.transaction
      ? greetingStatuses(pool.serverDefaults ?? server.own, profile.settings)
      : greetingStatuses(server.parameters, NO_SETTINGS)
    if (current.rewriter !== null && nonConformingStrings(statuses.scs)) return
    const held: Shelved['held'] = { server }
    const heldKey = () => held.server?.backendKey ?? null
    const cancelKey = this.pooling.cancelKeys.issue(heldKey)
    const greets = greeting(NOTHING, statuses.encoded, cancelKey)
    const reset = carryingReset(server, profile.settings)
    const settings = this.relaySettingsFor(current)
    const resetMs = this.pooling.ownStatementTimeoutMs
    const onEnd = server.linkEndOnShelf()
    if (
      !this.shelf.shelve(link, profile.packet, greets, settings, lendForMs, reset, resetMs, onEnd)
    )
      return this.pooling.cancelKeys.forget(cancelKey)
    if (known) this.forget(server, known)
    const { generation } = this
    const presence = reset.presence
    const shelved = {
      pool,
      link,
      profile,
      cancelKey,
      held,
      heldKey,
      out: false,
      presence,
      generation,
    }
    this.shelved.set(server, shelved)
    this.byLink.set(link, server)
  }

  /** A session pool's connection, reset in C, carrying the client's settings as asked. */
  private sessionLink(server: ServerConnection, profile: LoginProfile) {
    return carriesAlready(server, profile.settings) ? server.waitingLink() : null
  }

  /**
   * A transaction pool's connection, C watching it from now on, with the client's settings
   * applied and none of its statements prepared: its next client runs on it as it is.
   */
  private transactionLink(server: ServerConnection, profile: LoginProfile) {
    if (server.prepared.size > 0 || !sameSettings(server.settings, profile.settingsByName))
      return null
    return server.watchInC()
  }

  resetting(server: ServerConnection): boolean {
    const shelved = this.shelved.get(server)
    return shelved !== undefined && !shelved.out && this.shelf.resetting(shelved.link)
  }

  withdraw(server: ServerConnection): boolean {
    const shelved = this.shelved.get(server)
    if (!shelved) return true
    this.forget(server, shelved)
    // A lent connection's key is its client's, which the client forgets.
    if (shelved.out) return true
    this.pooling.cancelKeys.forget(shelved.cancelKey)
    return this.shelf.unshelve(shelved.link)
  }

  /**
   * A login in C was lent `link`: its client holds the connection now, as startPooledClient
   * would have lent it. Null for a link that was not shelved here.
   */
  lent(link: ServerLinkHandle): { pooled: PooledClient; profile: LoginProfile } | null {
    this.takeReturns()
    const server = this.byLink.get(link)
    const shelved = server && this.shelved.get(server)
    if (!shelved || shelved.out) return null
    shelved.out = true
    shelved.pool.lentOutside(server)
    server.takeLink()
    const { pool, profile, cancelKey, held } = shelved
    const pooled: PooledClient = {
      pool,
      server,
      held,
      settings: profile.settings,
      cancelKey,
      leftover: NOTHING,
      backOnShelf: (key) => this.backOnShelf(shelved, server, key),
    }
    return { pooled, profile }
  }

  /**
   * A client lent `server` in C said goodbye cleanly: the connection goes back on the shelf in C
   * at once, idle in its pool, its reset under way there, for its next client to get `key`.
   * Returns what the link tells of its end; null when it comes back through the pool as any
   * other: a client waits for a connection, the pool shrank or closed, the connection is too old,
   * a reload came since it was shelved, or the presence lock moved (its reset would differ).
   */
  private backOnShelf(lent: Shelved, server: ServerConnection, key: BackendKey) {
    const { pool, link } = lent
    if (!this.lending || lent.generation !== this.generation) return null
    if (server.holdsPresence !== lent.presence || this.shelved.get(server) !== lent) return null
    if (!pool.takeBack(server)) return null
    this.pooling.cancelKeys.adopt(key, lent.heldKey)
    lent.cancelKey = key
    lent.out = false
    // The reset's DISCARD ALL drops the client's statements; the settings it takes up again.
    if (this.transaction) server.resetTo(lent.profile.settingsByName)
    return server.keepLinkOnShelf(link)
  }

  /**
   * Takes every connection back, and shelves them again under the settings in force now (a
   * reload); with `stop` (a shutdown), lends none from now on. A change of primary needs no
   * call: the pools close the connections to the old one (Pool.sweep), which withdraws them.
   */
  reshelve(stop = false): void {
    this.settle()
    this.lending = !stop
    this.generation++
    this.profiles.clear()
    for (const [server, { pool, out, profile }] of [...this.shelved]) {
      if (out || !this.withdraw(server)) continue
      // A transaction pool's offer takes its client from here: only a leaving client sets it.
      if (this.transaction) this.lastClient.set(server, profile)
      this.offer(pool, server)
    }
  }

  private forget(server: ServerConnection, shelved: Shelved): void {
    this.shelved.delete(server)
    this.byLink.delete(shelved.link)
  }

  private relaySettingsFor(current: SessionSettings): LentRelaySettings {
    let made = this.relaySettings.get(current)
    if (!made) {
      const { maxMessageBytes, interceptTypes, statementNeedles, queryCache } = this.transaction
        ? keptRelaySettings(current, false)
        : relaySettings(current, false)
      made = [FRONTEND_TYPE_CHARS, maxMessageBytes, interceptTypes, statementNeedles, queryCache]
      this.relaySettings.set(current, made)
    }
    return made
  }
}
