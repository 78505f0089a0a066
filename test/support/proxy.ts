import { inject } from 'vitest'
import type { z } from 'zod'
import { parseConfig } from '../../src/config/load.js'
import type { configSchema } from '../../src/config/schema.js'
import { createLogger } from '../../src/log.js'
import { startProxy, type ProxyOptions } from '../../src/proxy/proxy-server.js'
import { POOL_PASSWORD, writeUserlist } from './pool-auth.js'

/** The relay the suites run with: PGFENCE_TEST_RELAY, else the default (native). */
export const relayUnderTest = (): 'native' | 'node' | undefined =>
  process.env.PGFENCE_TEST_RELAY === 'node' ? 'node' : undefined

/** The pool mode the suites run with: PGFENCE_TEST_POOL, else none (vitest.config's pooled runs). */
export const poolUnderTest = (): 'session' | 'transaction' | undefined => {
  const mode = process.env.PGFENCE_TEST_POOL
  return mode === 'session' || mode === 'transaction' ? mode : undefined
}

/**
 * Session mode: a pool as large as any suite's crowd of clients, since each holds its server
 * connection. Transaction mode: few server connections, so that clients share them.
 */
const POOLED_RUN_SIZE = { session: 120, transaction: 4 } as const

/**
 * Under PGFENCE_TEST_POOL, the pool and a userlist for the upstream URL's user (its password, or
 * POOL_PASSWORD when it has none), and the password clients then give; else nothing.
 */
export function pooledRun(upstreamUrl: string): {
  overrides: ConfigOverrides
  password?: string
} {
  const mode = poolUnderTest()
  if (!mode) return { overrides: {} }
  const upstream = new URL(upstreamUrl)
  const password = decodeURIComponent(upstream.password) || POOL_PASSWORD
  const user = decodeURIComponent(upstream.username)
  return {
    overrides: {
      pool: { mode, size: POOLED_RUN_SIZE[mode] },
      auth: { file: writeUserlist([`"${user}" "${password}"`]) },
    },
    password,
  }
}

/** `url` with `password` set, when one is given and the URL has none. */
export function withPassword(url: URL, password: string | undefined): URL {
  if (password !== undefined && url.password === '') url.password = encodeURIComponent(password)
  return url
}

/** A database's URL through a proxy, with the pooled run's password (`pooledRun`) if any. */
export function urlThrough(
  databaseUrl: string,
  proxy: { host: string; port: number },
  password?: string,
): string {
  const url = new URL(databaseUrl)
  url.hostname = proxy.host
  url.port = String(proxy.port)
  return withPassword(url, password).toString()
}

/** Config as written in a file: every section and field optional. */
export type ConfigOverrides = z.input<typeof configSchema>
type LogLevel = NonNullable<NonNullable<ConfigOverrides['log']>['level']>

export interface TestProxy {
  host: string
  port: number
  /** URL through the proxy; user, password and database default to those of the upstream URL. */
  url(user?: string, database?: string, password?: string): string
  /** Sessions relayed natively now. */
  nativeSessionCount(): number
  /** Client connections open now, sessions and those still starting. */
  connectionCount(): number
  /** The admin endpoint's port, when admin.listen is set. */
  adminPort?: number
  /** Re-reads the config file given as `options.configFile`. */
  reload(): Promise<void>
  close(): Promise<void>
}

/**
 * Starts the proxy in this process on a free loopback port in front of `upstreamUrl`
 * (the test PostgreSQL by default). Logs are silent unless PGFENCE_TEST_LOG_LEVEL is set;
 * PGFENCE_TEST_RELAY picks the relay (native by default). `options` replace the wiring's.
 */
export async function startTestProxy(
  overrides: ConfigOverrides = {},
  upstreamUrl: string = inject('postgresUrl'),
  options: ProxyOptions = {},
): Promise<TestProxy> {
  const upstream = new URL(upstreamUrl)
  // A suite that sets its own pool (or auth) is not run pooled by PGFENCE_TEST_POOL.
  const pooled = overrides.pool || overrides.auth ? { overrides: {} } : pooledRun(upstreamUrl)
  const config = parseConfig({
    ...pooled.overrides,
    ...overrides,
    listen: { host: '127.0.0.1', port: 0, ...overrides.listen },
    // A suite that lists upstream.hosts names its nodes itself.
    upstream: overrides.upstream?.hosts
      ? overrides.upstream
      : { host: upstream.hostname, port: Number(upstream.port || 5432), ...overrides.upstream },
    // Short, so that a test which leaves a session open does not hold up its file for long.
    limits: { shutdownTimeoutMs: 2000, ...overrides.limits },
    log: { level: (process.env.PGFENCE_TEST_LOG_LEVEL ?? 'silent') as LogLevel, ...overrides.log },
    // The suites run once with the native relay and once (some of them) without it.
    relay: overrides.relay ?? relayUnderTest(),
  })
  // Wired as `pgfence start` wires it: fencing applies only when the overrides name tables.
  const server = await startProxy(config, { logger: createLogger(config.log.level), ...options })
  return {
    host: server.host,
    port: server.port,
    url: (user, database, password) => {
      const url = new URL(upstreamUrl)
      url.hostname = server.host
      url.port = String(server.port)
      if (user !== undefined) {
        url.username = user
        url.password = password ?? ''
      }
      if (database !== undefined) url.pathname = `/${database}`
      return withPassword(url, pooled.password).toString()
    },
    nativeSessionCount: () => server.nativeSessionCount(),
    connectionCount: () => server.connectionCount(),
    adminPort: server.adminPort,
    reload: () => server.reload(),
    close: () => server.close(),
  }
}
