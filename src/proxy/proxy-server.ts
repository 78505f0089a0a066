import net from 'node:net'
import type { Config } from '../config/schema.js'
import { createLogger, lazyChild, type LevelLogger, type Logger } from '../log.js'
import { ANSWER_NO, ANSWER_YES, runStartupHandshake } from '../client/startup-handshake.js'
import { decodeStartupPacket } from '../wire/startup-packet.js'
import { SASL_OFFER, verifierFor } from '../auth/client-authenticator.js'
import type { ScramVerifier } from '../auth/scram.js'
import type { Secret } from '../auth/secret.js'
import {
  NativeLogins,
  nativeLoginAvailable,
  startupAfterNativeLogin,
  type NativeLoginResult,
  type StartupAfterLogin,
} from '../auth/native-login.js'
import { NativeAcceptor, nativeAcceptAvailable } from '../auth/native-accept.js'
import { LoginOutcome } from '../auth/login-codes.js'
import { acceptClients, type ClientConnection } from '../client/client-connection.js'
import { connectUpstream } from '../server/upstream-connector.js'
import { cancelBackend, forwardCancel } from '../server/cancel-forwarder.js'
import { applyKeepalive } from '../net/tcp-keepalive.js'
import { keepaliveForAccepted, listenerOptionsInherited } from '../net/listener-options.js'
import { UpstreamLogin } from '../server/upstream-login.js'
import { PgError } from '../wire/error-response.js'
import { ProxySession } from '../session/session.js'
import { clientTls, sameCertificate } from '../client/client-tls.js'
import {
  lentRelay,
  nativeRelayModule,
  type NativeRelay,
  type RelayCallbacks,
} from '../relay/native-relay.js'
import { watchSessionTimeouts } from '../session/session-timeouts.js'
import {
  settingsForDatabase,
  type SettingsHolder,
  type SettingsOptions,
} from '../fencing/live-settings.js'
import { LiveConfig } from './live-config.js'
import { SessionRegistry, type RegisteredSession } from '../session/session-registry.js'
import { consoleCommands } from '../admin/console-commands.js'
import { listenAll, type Listeners } from './listeners.js'
import { ProxyMetrics } from '../admin/metrics.js'
import { startAdminHttp, type AdminHttpServer } from '../admin/http-server.js'
import { CONSOLE_DATABASE, consoleLogin, openConsole } from '../admin/console-session.js'
import { upstreamAccepts } from '../server/upstream-probe.js'
import { commitsMayWait, connectToPrimary, followUpstream } from '../upstream/primary-tracker.js'
import type { UpstreamNode } from '../upstream/upstream-node.js'
import { followFailovers } from '../session/failover.js'
import { ChurnCollector } from '../session/churn-collector.js'
import { createPooling } from './pooling.js'
import { serverStates } from '../admin/pool-view.js'
import {
  goodbyeToShelf,
  lendServer,
  startSessionClient,
  startTransactionClient,
  type GreetedClient,
  type PooledClient,
} from '../session/pooled-startup.js'
import { transactionSession, type TransactionSession } from '../session/transaction-session.js'
import { LendingInC, type LoginProfile } from '../session/lent-in-c.js'
import { LentLogin, type MadeSession } from '../session/lent-login.js'
import { LinkShelf } from '../relay/link-shelf.js'
import type { CompiledRelayHandle, ServerLinkHandle } from '../native-addon.js'

export interface ProxyOptions extends SettingsOptions {
  logger?: Logger
  /** The config file that reload() re-reads (SIGHUP, the console's RELOAD). */
  configFile?: string
  /**
   * Runs V8's full collection after waves of closed sessions (see ChurnCollector). It turns on
   * --expose-gc for the whole process, so only the CLI, which owns the process, asks for it.
   */
  collectAfterChurn?: boolean
}

const SHUTDOWN = new PgError('57P01', 'terminating connection due to administrator command')
const TOO_MANY_CLIENTS = new PgError('53300', 'sorry, too many clients already')
const SHUTTING_DOWN = new PgError('57P03', 'the database system is shutting down')
/** A pooled session logs in to no server: its login never times out (shared, never aborted). */
const NO_LOGIN_DEADLINE = new AbortController().signal
const NOTHING_TO_DO = () => {}

export interface RunningProxy {
  host: string
  port: number
  /** `<listen.unixSocketDir>/.s.PGSQL.<port>`, when set. */
  socketPath?: string
  /** The port of admin.listen (/metrics, /healthz, /readyz), when set. */
  adminPort?: number
  /** Client connections open now, sessions and those still starting. */
  connectionCount(): number
  /** Sessions whose bytes flow through the native relay now. */
  nativeSessionCount(): number
  /** Re-reads the config file; rejects with the reason when the new config is refused. */
  reload(): Promise<void>
  /**
   * Stops accepting, closes each session once it is idle outside a transaction (57P01), lets
   * transactions finish up to limits.shutdownTimeoutMs, then closes what is left.
   */
  close(): Promise<void>
}

/** Starts listening; resolves once the port is bound. */
export async function startProxy(
  config: Config,
  options: ProxyOptions = {},
): Promise<RunningProxy> {
  const logger = options.logger ?? createLogger(config.log.level)
  const nativeRelay = config.relay === 'native' && nativeRelayModule !== null
  const ownTls = clientTls(config, nativeRelay)
  if (config.relay === 'native' && !nativeRelay)
    logger.warn('the native relay was not built (npm run build:native): relaying in JavaScript')
  const live = await LiveConfig.create(config, nativeRelay, logger, options)
  const registry = new SessionRegistry()
  const { connections } = registry
  const churn = options.collectAfterChurn ? new ChurnCollector() : null
  let nextId = 0
  let draining = false
  const pools = () => pooling?.pools.stats() ?? null
  const upstream = followUpstream(config.upstream)
  /** Cancel requests and console logins go to the primary (the first node while none is known). */
  const primaryConfig = () => (upstream.current() ?? upstream.nodes[0]!).config
  const metrics = new ProxyMetrics(
    {
      clientConnections: () => registry.clientConnections(),
      serverConnections: () => serverStates(registry, pools()),
      nativeRelaySessions: () => registry.nativeRelaySessions(),
      transactions: () => registry.transactions(),
      rewriteCacheLookups: () => live.cacheLookups(),
      pools: () => pools() ?? [],
      upstreamNodes: () => upstream.nodes,
    },
    Boolean(config.admin?.listen),
  )
  const commands = consoleCommands(registry, live, metrics, pools)
  const pooling = createPooling(live, upstream, logger, (database, user) =>
    metrics.poolObserver(database, user),
  )
  followFailovers(upstream, registry, pooling?.pools ?? null, () => metrics.failover(), logger)

  const transactionPooling = pooling !== null && live.config.pool.mode === 'transaction'
  const nativeLogins =
    pooling &&
    nativeRelay &&
    nativeLoginAvailable &&
    nativeAcceptAvailable &&
    (!ownTls || ownTls.context)
      ? new NativeLogins(SASL_OFFER, (packet) => verifierInC(packet), CONSOLE_DATABASE)
      : null
  if (nativeLogins && ownTls?.context) nativeLogins.takeTls(ownTls.context)
  /** Accepts TCP clients in C, each straight into its login in C (when Node's options are inherited). */
  const acceptor =
    nativeLogins &&
    NativeAcceptor.create(
      nativeLogins,
      (connection, result, remainingMs) =>
        admit(connection, result, startupLeft(result, remainingMs)),
      (connection, relay, link, lentMsAgo, inside) =>
        lentInC(connection, relay, link, lentMsAgo, inside ?? connection),
      transactionPooling,
    )
  /** The pools' idle connections lent in C to the logins accepted there. */
  const shelf = acceptor && LinkShelf.lendingTo(nativeLogins.logins, transactionPooling)
  const lending =
    shelf &&
    new LendingInC(
      shelf,
      pooling!,
      live.settings,
      (database) => live.settings.current.nameChecks?.dueInMs(database) ?? Infinity,
      (transactions) => {
        registry.ended(transactions)
        logger.debug({ transactions }, 'logins lent in C left before JavaScript heard of them')
      },
      transactionPooling,
    )
  if (lending) {
    pooling!.pools.lender = lending
    registry.settle = () => lending.settle()
    live.onReload(() => () => lending.reshelve())
  }
  if (acceptor) registry.loginsInC = () => acceptor.pending()
  /** What refuses a client as soon as its StartupMessage is read: the limit, a shutdown. */
  function refusalBeforeLogin(): PgError | null {
    if (registry.clientCount() > live.config.limits.maxClientConnections) return TOO_MANY_CLIENTS
    return draining ? SHUTTING_DOWN : null
  }
  /**
   * C answers a user's next logins as verifierInC chose for the first while nothing refuses
   * logins before authentication (the room left under maxClientConnections, none while
   * draining); it forgets when the user list may have changed (a reload).
   */
  function giveRoom(): void {
    acceptor?.room(draining ? -1 : live.config.limits.maxClientConnections - connections.size)
  }
  const acceptorSettings = (config: Config) =>
    acceptor?.settings(config.limits.startupTimeoutMs, logger.isLevelEnabled('debug'))
  giveRoom()
  acceptorSettings(config)
  live.onReload((next) => () => {
    nativeLogins?.forget()
    giveRoom()
    acceptorSettings(next)
  })

  /**
   * What a login in C does with a startup-phase packet: check a plain pooled login whose user
   * has a SCRAM secret or a password in auth.file, and which nothing refuses before
   * authentication, against it; take TLS up when pgfence has it (the login goes on inside it),
   * refuse an encryption request pgfence does not take up; leave anything else to JavaScript
   * (null).
   */
  function verifierInC(bytes: Buffer): ScramVerifier | Buffer | null {
    let packet
    try {
      packet = decodeStartupPacket(bytes)
    } catch {
      return null
    }
    if (packet.kind === 'ssl') return ownTls ? ANSWER_YES : ANSWER_NO
    if (packet.kind === 'gssenc') return ANSWER_NO
    if (packet.kind !== 'startup' || packet.minor !== 0 || packet.params.has('replication'))
      return null
    const user = packet.params.get('user')
    if (!user || packet.params.get('database') === CONSOLE_DATABASE) return null
    if (refusalBeforeLogin()) return null
    const secret = pooling!.credentials.fromFile(user)
    return secret && secret.kind !== 'md5' ? verifierFor(user, secret) : null
  }

  /**
   * Goes on from a login in C that ran inside TLS, on its channel's plaintext end (`connection`),
   * as from one on a plain connection: what C leaves to JavaScript goes on there, inside TLS.
   */
  function loginInsideTls(
    connection: ClientConnection,
    result: NativeLoginResult,
    onEncrypted: (socket: net.Socket) => void,
    secretOf: (user: string) => Secret | null,
  ): Promise<StartupAfterLogin> {
    onEncrypted(connection.socket)
    return startupAfterNativeLogin(
      connection,
      result,
      (received) =>
        runStartupHandshake(connection, undefined, onEncrypted, { received, encrypted: true }),
      secretOf,
    )
  }

  /**
   * Serves a client from its startup on. `login`: how its login in C ended, or will, or null when
   * JavaScript reads the startup itself. `timeoutMs`: what is left of the startup timeout; null
   * once the client has authenticated (waiting for a server connection is pool.waitTimeoutMs's).
   */
  async function serve(
    accepted: ClientConnection,
    conn: AcceptedClient,
    login: NativeLoginResult | Promise<NativeLoginResult> | null,
    timeoutMs: number | null,
  ): Promise<void> {
    const timedOut = () => {
      conn.log.info('startup not completed in time')
      accepted.destroy()
    }
    if (timeoutMs === 0) return timedOut()
    const startupTimer = timeoutMs === null ? undefined : setTimeout(timedOut, timeoutMs)
    // A client gone during startup (TLS included) needs no timer.
    if (startupTimer) accepted.onClose(() => clearTimeout(startupTimer))
    /** The client's TLS socket, once it has one. */
    let secure: net.Socket | null = null
    let upstreamLogin: UpstreamLogin | undefined
    try {
      const onEncrypted = (socket: net.Socket) => (secure = socket)
      const secretOf = (user: string) => pooling!.credentials.fromFile(user)
      const result = await login
      const { handshake, login: authenticated } = !result
        ? { handshake: await runStartupHandshake(accepted, ownTls?.start, onEncrypted) }
        : result.inside
          ? await loginInsideTls(result.inside, result, onEncrypted, secretOf)
          : await startupAfterNativeLogin(
              accepted,
              result,
              (received) => runStartupHandshake(accepted, ownTls?.start, onEncrypted, { received }),
              secretOf,
            )
      if (handshake.kind === 'cancel') {
        clearTimeout(startupTimer)
        accepted.destroy()
        // A client lent in C may hold a key JavaScript has not taken in yet.
        registry.settle()
        const request = pooling ? pooling.cancelKeys.translate(handshake.bytes) : handshake.bytes
        return request ? forwardCancel(primaryConfig(), request) : undefined
      }
      const refused = refusalBeforeLogin()
      if (refused) throw refused
      const params = handshake.packet.params
      if (params.get('database') === CONSOLE_DATABASE) {
        const users = live.config.admin?.users ?? []
        const login = consoleLogin(primaryConfig(), pooling?.credentials ?? null)
        return await openConsole(login, handshake, users, commands, {
          onOpen: () => {
            clearTimeout(startupTimer)
            const raw = accepted.socket
            registry.consoles.add(raw)
            raw.once('close', () => registry.consoles.delete(raw))
          },
          logger: conn.log,
        })
      }
      const {
        database,
        log: sessionLog,
        settings: sessionSettings,
        track,
      } = sessionOf(conn, params, () => {
        clearTimeout(startupTimer)
        upstreamLogin?.done()
      })
      const nameCheck = params.has('replication')
        ? null
        : () => live.settings.current.nameChecks?.loginQuery(database) ?? null
      const pooledStart = {
        nameCheck,
        nameCheckDue: () =>
          nameCheck !== null &&
          (live.settings.current.nameChecks?.dueInMs(database) ?? Infinity) <= 0,
        fencing: () => sessionSettings.current.rewriter !== null,
        // Waiting for a server connection is pool.waitTimeoutMs's, not the startup's.
        authenticated: () => clearTimeout(startupTimer),
        login: authenticated,
      }
      if (transactionPooling) {
        const pooled = await startTransactionClient(
          handshake.connection,
          params,
          pooling!,
          pooledStart,
        )
        const profile = lending?.profile(handshake.packet.bytes, params) ?? null
        const session = pooledTransactions(
          handshake.connection,
          pooled,
          profile,
          sessionSettings,
          sessionLog,
        )
        session.start(pooled.leftover)
        return track(session, () => pooled.held.server?.node ?? null)
      }
      if (pooling) {
        const pooled = await startSessionClient(handshake.connection, params, pooling, pooledStart)
        return keptSession(
          handshake.connection,
          params,
          lending?.profile(handshake.packet.bytes, params) ?? null,
          pooled,
          sessionSettings,
          sessionLog,
          track,
        ).startPooled(pooled.leftover)
      }
      // The server speaks only after the startup packet, which the session sends.
      const relay: { session?: ProxySession } = {}
      upstreamLogin = new UpstreamLogin(config.upstream)
      const deadline = upstreamLogin.deadline
      let node = upstream.nodes[0]!
      const server = await connectToPrimary(
        upstream,
        deadline,
        (primary) => {
          node = primary
          return connectUpstream(primary.config, (chunk) => relay.session!.fromServer(chunk), {
            keepalive: live.config.tcpKeepalive,
            deadline,
            nativeTls: nativeRelay,
          }).catch((err: unknown) => {
            metrics.upstreamConnectFailed()
            throw err
          })
        },
        (socket) => socket.destroy(),
      )
      if (accepted.closed) return void server.destroy()
      const session = (relay.session = new ProxySession(handshake.connection, server, {
        settings: sessionSettings,
        loginQuery: nameCheck,
        logger: sessionLog,
        onReady: () => {
          clearTimeout(startupTimer)
          upstreamLogin?.done()
        },
        keepChannelBinding: sameCertificate(handshake.connection.socket, server, ownTls),
        nativeRelay,
        loginDeadline: upstreamLogin.deadline,
        cancelBackend: (key) => cancelBackend(node.config, key),
        commitsMayWait: () => commitsMayWait(upstream, node),
        onRejection: (code, table) => metrics.rejection(code, table),
        startupParams: params,
      }))
      track(session, () => node)
      session.start(handshake.packet.bytes, handshake.leftover)
      sessionLog.debug('session started')
    } catch (err) {
      clearTimeout(startupTimer)
      upstreamLogin?.done()
      refuse(accepted, secure, err, conn.log)
    }
  }

  /**
   * What a client's session keeps whatever its mode: its database, its logger, the settings in
   * force for that database, and how it enters the registry (`onClosed` runs at its end).
   */
  function sessionOf(
    conn: AcceptedClient,
    params: Map<string, string>,
    onClosed: () => void,
    connectedAt = new Date(),
  ) {
    const database = params.get('database') ?? params.get('user') ?? ''
    const log = lazyChild(logger, () => ({
      conn: conn.id,
      peer: conn.peer(),
      user: params.get('user'),
      database,
    }))
    const settings = settingsForDatabase(live.settings, database)
    /** Enters a session in the registry; returns what takes it out at its end. */
    const register = (session: RegisteredSession, serverNode: () => UpstreamNode | null) => {
      const remove = registry.add(session, {
        id: conn.id,
        user: params.get('user')!,
        database,
        peer: conn.peer,
        connectedAt,
        serverNode,
      })
      if (draining) session.closeWhenIdle(SHUTDOWN)
      return (transactions: number) => {
        remove(transactions)
        onClosed()
        churn?.sessionClosed()
      }
    }
    const track = (session: RegisteredSession, serverNode: () => UpstreamNode | null): void => {
      const ended = register(session, serverNode)
      void session.closed.then(() => ended(session.state().transactions))
    }
    return { database, log, settings, register, track }
  }
  type SessionTrack = ReturnType<typeof sessionOf>['track']

  /**
   * A session-mode client's session on the server connection lent to it, greeted already;
   * `profile`: its StartupMessage's, for the connection to be lent in C to the next such client.
   */
  function keptSession(
    connection: ClientConnection,
    params: Map<string, string>,
    profile: LoginProfile | null,
    pooled: PooledClient,
    settings: SettingsHolder,
    log: LevelLogger,
    track: SessionTrack | null,
  ): ProxySession {
    const session = new ProxySession(connection, pooled.server.socket, {
      settings,
      logger: log,
      keepChannelBinding: false,
      nativeRelay,
      loginDeadline: NO_LOGIN_DEADLINE,
      cancelBackend: (key) => cancelBackend(pooled.server.node.config, key),
      commitsMayWait: () => commitsMayWait(upstream, pooled.server.node),
      onRejection: (code, table) => metrics.rejection(code, table),
      pooled: lendServer(pooled, pooling!),
      startupParams: params,
    })
    track?.(session, () => pooled.server.node)
    if (profile) lending!.serves(pooled.server, profile)
    return session
  }

  /**
   * A transaction-mode client's session, greeted already (`profile`: its StartupMessage's, for
   * the connection it leaves to be lent in C to the next such client), not yet started.
   */
  function pooledTransactions(
    connection: ClientConnection,
    pooled: GreetedClient & Pick<PooledClient, 'backOnShelf'>,
    profile: LoginProfile | null,
    settings: SettingsHolder,
    log: LevelLogger,
  ): TransactionSession {
    return transactionSession(connection, pooled, pooling!, {
      settings,
      logger: log,
      onRejection: (code, table) => metrics.rejection(code, table),
      nativeRelay,
      cancelBackend: (key, server) => cancelBackend(server.node.config, key),
      commitsMayWait: (server) => commitsMayWait(upstream, server.node),
      leaving: profile ? (server) => lending!.left(pooled.pool, server, profile) : undefined,
      backOnShelf: pooled.backOnShelf,
    })
  }

  /**
   * A login in C lent a shelved connection (lending in C), reported now that JavaScript must take
   * part: greeted and relayed already; returns the relay's callbacks (undefined: C closes it all).
   */
  /** `client`: where the session speaks to the client (inside TLS, the channel's plaintext end). */
  function lentInC(
    connection: ClientConnection,
    relay: CompiledRelayHandle,
    link: ServerLinkHandle,
    lentMsAgo: number,
    client: ClientConnection,
  ): RelayCallbacks | undefined {
    const conn = enter(connection)
    const lent = lending?.lent(link)
    if (!lent) {
      connection.destroy()
      return undefined
    }
    const { pooled, profile } = lent
    const { server, pool } = pooled
    const lentAt = new Date(Date.now() - lentMsAgo)
    const { log, register } = sessionOf(conn, profile.params, NOTHING_TO_DO, lentAt)
    const native = lentRelay(relay)
    log.debug({ lent: true }, 'session relayed natively')
    const login = new LentLogin({
      relay: native,
      busyInTransaction: transactionPooling,
      make: () => madeSession(client, native, pooled, profile, log),
      backOnShelf: (key) => {
        const onShelf = goodbyeToShelf(pooled, pooling!, key)
        if (!onShelf) return null
        log.debug('server connection back on the shelf in C')
        if (transactionPooling) pool.unkeep(server)
        client.end()
        return onShelf
      },
      ended: (transactions) => ended(transactions),
    })
    const ended = transactionPooling
      ? register(login, () => pooled.held.server?.node ?? null)
      : register(login, () => server.node)
    // A client that waits for a connection makes the session, which gives this one back.
    if (transactionPooling) pool.keep(server, () => login.session().giveBack?.())
    return login.callbacks()
  }

  /** The session of a client lent a connection in C, started as at its login (LentLogin). */
  function madeSession(
    connection: ClientConnection,
    relay: NativeRelay,
    pooled: PooledClient,
    profile: LoginProfile,
    log: LevelLogger,
  ): MadeSession {
    const { sessionSettings } = profile
    if (transactionPooling) {
      const session = pooledTransactions(connection, pooled, profile, sessionSettings, log)
      const callbacks = session.startLent(relay, pooled.server)
      return { session, callbacks, giveBack: () => session.giveBack() }
    }
    const { params } = profile
    const session = keptSession(connection, params, profile, pooled, sessionSettings, log, null)
    return { session, callbacks: session.startLent(relay) }
  }

  /** A client connection counts from here on: its number, address and logger. */
  function enter(connection: ClientConnection): AcceptedClient {
    const id = ++nextId
    // The address is looked up only for a log line or the console that shows it.
    const peer = () => connection.peer()
    const conn = { id, peer, log: lazyChild(logger, () => ({ conn: id, peer: peer() })) }
    const leave = connections.add(connection)
    giveRoom()
    connection.onClose(() => {
      leave()
      giveRoom()
    })
    connection.onError((err) => conn.log.debug({ err: err.message }, 'client socket error'))
    return conn
  }

  /** A client's connection from its startup on, however it was accepted (see serve). */
  function admit(
    connection: ClientConnection,
    login: NativeLoginResult | Promise<NativeLoginResult> | null,
    timeoutMs: number | null,
  ): void {
    const conn = enter(connection)
    void serve(connection, conn, login, timeoutMs)
  }

  const listeners = await listenAll(config.listen, logger)
  const keepaliveForClients = (keepalive: Config['tcpKeepalive']) => {
    for (const server of listeners.servers) keepaliveForAccepted(server, keepalive)
    for (const fd of acceptor?.descriptors ?? []) keepaliveForAccepted(fd, keepalive)
  }
  keepaliveForClients(config.tcpKeepalive)
  live.onReload((next) => () => keepaliveForClients(next.tcpKeepalive))
  for (const server of listeners.servers) {
    // Node's TLS reads from the socket itself, so its sockets keep Node's own reads.
    const reuseReadBuffers = !ownTls || ownTls.context !== undefined
    acceptClients(
      server,
      reuseReadBuffers,
      (connection, started) => {
        if (!listenerOptionsInherited)
          applyKeepalive(connection.socketOrDescriptor(), live.config.tcpKeepalive)
        const login = started ? null : nativeLogins!.login(connection)
        admit(connection, login, live.config.limits.startupTimeoutMs)
      },
      nativeLogins !== null,
    )
    // Node's options reach the clients the addon accepts only where they are inherited.
    if (listenerOptionsInherited) acceptor?.takeOver(server)
  }
  // The sweep is armed only while a timeout is set: a reload may arm, change or stop it.
  let stopTimeouts = watchSessionTimeouts(registry, live.config.limits)
  live.onReload((next) => () => {
    stopTimeouts()
    stopTimeouts = watchSessionTimeouts(registry, next.limits)
  })
  const probes = {
    serving: () => !draining,
    upstreamReachable: async () => {
      const primary = upstream.current()
      return primary !== null && (await upstreamAccepts(primary.config))
    },
  }
  const admin: AdminHttpServer | undefined =
    config.admin?.listen &&
    (await startAdminHttp(config.admin.listen, metrics, probes, logger).catch(
      async (err: unknown) => {
        // Nothing may keep the process alive once starting failed (its port is in use).
        stopTimeouts()
        pooling?.pools.close()
        upstream.close()
        await listeners.close()
        throw err
      },
    ))

  return {
    host: config.listen.host,
    port: listeners.port,
    socketPath: listeners.socketPath,
    adminPort: admin?.port,
    connectionCount: () => registry.clientCount(),
    nativeSessionCount: () => registry.nativeRelaySessions(),
    reload: () => live.reload(registry),
    close: async () => {
      draining = true
      lending?.reshelve(true)
      giveRoom()
      acceptor?.stop()
      stopTimeouts()
      await drain(
        listeners,
        connections,
        [...registry],
        live.config.limits.shutdownTimeoutMs,
        logger,
      )
      acceptor?.closeLogins()
      pooling?.pools.close()
      upstream.close()
      await admin?.close()
    },
  }
}

/**
 * What is left of the startup timeout for a client whose login in C ended: none when it ran out
 * (0), no timer once the client has authenticated (null), at least a moment otherwise.
 */
function startupLeft(result: NativeLoginResult, remainingMs: number): number | null {
  if (result.outcome === LoginOutcome.TimedOut) return 0
  return result.outcome === LoginOutcome.Authenticated ? null : Math.max(1, remainingMs)
}

/**
 * A client connection's number and address, and its logger: its child logger is made when
 * something is first logged at an enabled level, since most connections log nothing before
 * their session's own logger takes over.
 */
interface AcceptedClient {
  id: number
  peer(): string
  log: LevelLogger
}

/**
 * Answers a failed startup with an ErrorResponse when there is one to give, then closes: over
 * the client's TLS socket when it has one.
 */
function refuse(
  client: ClientConnection,
  secure: net.Socket | null,
  err: unknown,
  log: LevelLogger,
) {
  if (!(err instanceof PgError)) {
    log.debug({ err: (err as Error).message }, 'connection closed during startup')
    return secure ? secure.destroy() : client.destroy()
  }
  log.info({ code: err.code, reason: err.message }, 'connection refused')
  if (secure) {
    if (!secure.destroyed) secure.end(err.encode())
    return void secure.destroySoon()
  }
  if (client.writable) client.write(err.encode())
  client.end()
}

async function drain(
  listeners: Listeners,
  connections: Iterable<ClientConnection>,
  sessions: RegisteredSession[],
  timeoutMs: number,
  logger: Logger,
): Promise<void> {
  const stopped = listeners.close()
  logger.info({ sessions: sessions.length, timeoutMs }, 'draining')
  for (const session of sessions) session.closeWhenIdle(SHUTDOWN)
  const idle = Promise.all(sessions.map((session) => session.closed))
  let timer: NodeJS.Timeout | undefined
  const timeout = new Promise<void>((resolve) => (timer = setTimeout(resolve, timeoutMs)))
  await Promise.race([idle, timeout])
  clearTimeout(timer)
  const cut = Promise.all(sessions.map((session) => session.cut('shutdown')))
  for (const socket of connections) socket.destroy()
  await cut
  await stopped
}
