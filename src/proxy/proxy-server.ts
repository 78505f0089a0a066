import net from 'node:net'
import tls from 'node:tls'
import { readFileSync } from 'node:fs'
import { X509Certificate } from 'node:crypto'
import type { Config } from '../config/schema.js'
import { createLogger, type Logger } from '../log.js'
import type { StatementRewriter } from '../rewrite/statement-rewriter.js'
import { runStartupHandshake } from '../client/startup-handshake.js'
import { acceptClients, type ClientConnection } from '../client/client-connection.js'
import { connectUpstream } from '../server/upstream-connector.js'
import { cancelBackend, forwardCancel, type BackendKey } from '../server/cancel-forwarder.js'
import { applyKeepalive } from '../server/tcp-keepalive.js'
import { UpstreamLogin } from '../server/upstream-login.js'
import { PgError } from '../wire/error-response.js'
import { ProxySession } from './session.js'
import { createFencingRewriter } from './fencing.js'
import { createNativeQueryCache } from './native-query-cache.js'
import { nativeRelayModule } from './native-relay.js'
import { watchSessionTimeouts } from './session-timeouts.js'
import { TableNameChecks } from './table-name-checks.js'
import { createPooling } from './pooling.js'
import { lendServer, startPooledClient } from './pooled-startup.js'
import { startTransactionSession, type TransactionSession } from './transaction-session.js'

export interface ProxyOptions {
  logger?: Logger
  /** Overrides the rewriter made from `config.fencing` (null: every statement passes through). */
  rewriter?: StatementRewriter | null
  /** Query templates the native relay keeps (4096). */
  queryCacheSize?: number
}

export interface RunningProxy {
  host: string
  port: number
  /** Client connections open now, sessions and those still starting. */
  connectionCount(): number
  /** Sessions whose bytes flow through the native relay now. */
  nativeSessionCount(): number
  /** Stops accepting, lets sessions finish up to limits.shutdownTimeoutMs, then closes them. */
  close(): Promise<void>
}

interface ClientTls {
  context: tls.SecureContext
  /** DER of the certificate clients see, to compare with the upstream's. */
  certificate: Buffer
}

function clientTls(config: Config): ClientTls | undefined {
  if (!config.tls) return undefined
  const cert = readFileSync(config.tls.cert)
  return {
    context: tls.createSecureContext({ cert, key: readFileSync(config.tls.key) }),
    certificate: new X509Certificate(cert).raw,
  }
}

/** Channel binding survives the proxy only when both legs show the same server certificate. */
function sameCertificate(client: net.Socket, upstream: net.Socket, ours?: ClientTls): boolean {
  if (!ours || !(client instanceof tls.TLSSocket) || !(upstream instanceof tls.TLSSocket))
    return false
  return upstream.getPeerCertificate().raw?.equals(ours.certificate) ?? false
}

/** Starts listening; resolves once the port is bound. */
export async function startProxy(
  config: Config,
  options: ProxyOptions = {},
): Promise<RunningProxy> {
  const logger = options.logger ?? createLogger(config.log.level)
  const ownTls = clientTls(config)
  const rewriter =
    options.rewriter !== undefined ? options.rewriter : await createFencingRewriter(config)
  const nativeRelay = config.relay === 'native' && nativeRelayModule !== null
  if (config.relay === 'native' && !nativeRelay)
    logger.warn('the native relay was not built (npm run build:native): relaying in JavaScript')
  const queryCache =
    nativeRelay && rewriter ? createNativeQueryCache(rewriter, options.queryCacheSize) : null
  // Only for fencing made from the config: its names are what the databases must resolve.
  const nameChecks =
    options.rewriter === undefined && rewriter ? new TableNameChecks(config.fencing, logger) : null
  const connections = new Set<net.Socket>()
  const sessions = new Set<ProxySession | TransactionSession>()
  let nextId = 0

  const pooling = createPooling(config, logger)

  async function serve(accepted: ClientConnection, log: Logger): Promise<void> {
    const raw = accepted.socket
    const startupTimer = setTimeout(() => {
      log.info('startup not completed in time')
      raw.destroy()
    }, config.limits.startupTimeoutMs)
    let client: net.Socket = raw
    let login: UpstreamLogin | undefined
    try {
      const handshake = await runStartupHandshake(
        accepted,
        ownTls?.context,
        (secure) => (client = secure),
      )
      if (handshake.kind === 'cancel') {
        clearTimeout(startupTimer)
        raw.destroy()
        const request = pooling ? pooling.cancelKeys.translate(handshake.bytes) : handshake.bytes
        return request ? forwardCancel(config.upstream, request) : undefined
      }
      if (connections.size > config.limits.maxClientConnections) {
        throw new PgError('53300', 'sorry, too many clients already')
      }
      const params = handshake.packet.params
      const database = params.get('database') ?? params.get('user') ?? ''
      const sessionLog = log.child({ user: params.get('user'), database })
      const names = params.has('replication') ? null : nameChecks
      const sessionOptions = {
        maxMessageBytes: config.limits.maxMessageBytes,
        rewriter,
        logger: sessionLog,
        nativeRelay,
        queryCache,
        cancelBackend: (key: BackendKey) => cancelBackend(config.upstream, key),
      }
      if (pooling && config.pool.mode === 'transaction') {
        const pooled = await startPooledClient(handshake.connection, params, pooling, false)
        const session = startTransactionSession(handshake.connection, pooled, pooling, config, {
          ...sessionOptions,
          logger: sessionLog,
        })
        return track(session)
      }
      if (pooling) {
        const pooled = await startPooledClient(handshake.connection, params, pooling, true)
        const session = new ProxySession(handshake.connection, pooled.server.socket, {
          ...sessionOptions,
          onReady: () => clearTimeout(startupTimer),
          keepChannelBinding: false,
          loginDeadline: new AbortController().signal,
          pooled: lendServer(pooled, pooling),
        })
        track(session)
        return session.startPooled(pooled.leftover)
      }
      // The server speaks only after the startup packet, which the session sends.
      const relay: { session?: ProxySession } = {}
      login = new UpstreamLogin(config.upstream)
      const upstream = await connectUpstream(
        config.upstream,
        (chunk) => relay.session!.fromServer(chunk),
        { keepalive: config.tcpKeepalive, deadline: login.deadline },
      )
      if (raw.destroyed) return void upstream.destroy()
      const session = (relay.session = new ProxySession(handshake.connection, upstream, {
        maxMessageBytes: config.limits.maxMessageBytes,
        // Read when used: a database whose names do not resolve gets its own rewriter.
        get rewriter() {
          return names?.rewriterFor(database) ?? rewriter
        },
        get queryCache() {
          return names?.rewriterFor(database) ? null : queryCache
        },
        loginQuery: names && (() => names.loginQuery(database)),
        logger: sessionLog,
        onReady: () => {
          clearTimeout(startupTimer)
          login?.done()
        },
        keepChannelBinding: sameCertificate(handshake.connection.socket, upstream, ownTls),
        nativeRelay,
        loginDeadline: login.deadline,
        cancelBackend: (key) => cancelBackend(config.upstream, key),
      }))
      track(session)
      session.start(handshake.packet.bytes, handshake.leftover)
      sessionLog.debug('session started')
    } catch (err) {
      clearTimeout(startupTimer)
      login?.done()
      refuse(client, err, log)
    }

    function track(session: ProxySession | TransactionSession): void {
      sessions.add(session)
      session.closed.then(() => {
        clearTimeout(startupTimer)
        login?.done()
        sessions.delete(session)
      })
    }
  }

  const server = net.createServer()
  server.on('error', (err) => logger.error({ err }, 'listener error'))

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(config.listen.port, config.listen.host, () => {
      server.off('error', reject)
      resolve()
    })
  })
  // A client TLS layer reads from the socket itself, so its sockets keep Node's own reads.
  acceptClients(server, !ownTls, (connection) => {
    const raw = connection.socket
    applyKeepalive(raw, config.tcpKeepalive)
    const log = logger.child({ conn: ++nextId, peer: `${raw.remoteAddress}:${raw.remotePort}` })
    connections.add(raw)
    raw.on('close', () => connections.delete(raw))
    raw.on('error', (err) => log.debug({ err: err.message }, 'client socket error'))
    void serve(connection, log)
  })
  const stopTimeouts = watchSessionTimeouts(sessions, config.limits)
  const address = server.address() as net.AddressInfo
  logger.info({ host: config.listen.host, port: address.port }, 'pgfence listening')

  return {
    host: config.listen.host,
    port: address.port,
    connectionCount: () => connections.size,
    nativeSessionCount: () =>
      [...sessions].filter((session) => 'relayedNatively' in session && session.relayedNatively)
        .length,
    close: async () => {
      stopTimeouts()
      await drain(server, connections, sessions, config.limits.shutdownTimeoutMs, logger)
      pooling?.pools.close()
    },
  }
}

/** Answers a failed startup with an ErrorResponse when there is one to give, then closes. */
function refuse(client: net.Socket, err: unknown, log: Logger): void {
  if (err instanceof PgError) {
    log.info({ code: err.code, reason: err.message }, 'connection refused')
    if (!client.destroyed) client.end(err.encode())
    client.destroySoon()
  } else {
    log.debug({ err: (err as Error).message }, 'connection closed during startup')
    client.destroy()
  }
}

async function drain(
  server: net.Server,
  connections: Set<net.Socket>,
  sessions: Set<ProxySession | TransactionSession>,
  timeoutMs: number,
  logger: Logger,
): Promise<void> {
  const stopped = new Promise<void>((resolve) => server.close(() => resolve()))
  logger.info({ sessions: sessions.size, timeoutMs }, 'draining')
  const idle = Promise.all([...sessions].map((session) => session.closed))
  let timer: NodeJS.Timeout | undefined
  const timeout = new Promise<void>((resolve) => (timer = setTimeout(resolve, timeoutMs)))
  await Promise.race([idle, timeout])
  clearTimeout(timer)
  const cut = Promise.all([...sessions].map((session) => session.cut('shutdown')))
  for (const socket of connections) socket.destroy()
  await cut
  await stopped
}
