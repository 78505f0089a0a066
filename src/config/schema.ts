import { z } from 'zod'
import { HOST_PORT, parseHostPort } from './host-port.js'
import { overlappingRules } from './table-names.js'

const port = z.number().int().min(1).max(65535)
// 0 asks the OS for a free port (tests, embedded runs).
const listenPort = z.number().int().min(0).max(65535)

const listen = z.strictObject({
  host: z.string().min(1).default('127.0.0.1'),
  port: listenPort.default(6432),
  /** Also listen on `<dir>/.s.PGSQL.<port>`, as PostgreSQL does; absent: no Unix socket. */
  unixSocketDir: z.string().min(1).optional(),
})

const hostPort = z
  .string()
  .regex(HOST_PORT, 'must be host:port (IPv6: [addr]:port)')
  .refine((text) => port.safeParse(parseHostPort(text).port).success, 'port out of range')

const upstream = z
  .strictObject({
    /** One node (default 127.0.0.1:5432): no probing, exactly one upstream. */
    host: z.string().min(1).optional(),
    port: port.optional(),
    /** Several nodes (src/upstream): server connections go to the primary only. */
    hosts: z.array(hostPort).min(1).optional(),
    /** Which node is the primary, by libpq's target_session_attrs rules (with hosts). */
    targetSessionAttrs: z.enum(['read-write', 'primary', 'any']).default('read-write'),
    primaryCheckIntervalMs: z.number().int().min(50).default(1000),
    /** Patroni REST endpoints, the i-th for the i-th of hosts: the primary answers GET /primary. */
    patroni: z
      .array(z.url({ protocol: /^https?$/ }))
      .min(1)
      .optional(),
    tls: z.enum(['disable', 'prefer', 'require', 'verify-full']).default('prefer'),
    ca: z.string().min(1).optional(),
    connectTimeoutMs: z.number().int().positive().default(5000),
  })
  .superRefine((value, ctx) => {
    const issue = (path: string, message: string) =>
      ctx.addIssue({ code: 'custom', path: [path], message })
    if (value.hosts && (value.host !== undefined || value.port !== undefined))
      issue('hosts', 'give either host/port or hosts, not both')
    if (value.patroni && value.patroni.length !== (value.hosts?.length ?? 0))
      issue('patroni', 'needs hosts, one Patroni endpoint for each host, in the same order')
  })
  // host/port: the one node, or the first of hosts (what a single-node reader sees).
  .transform(({ host, port, ...rest }) => {
    const first = rest.hosts ? parseHostPort(rest.hosts[0]!) : undefined
    return { ...rest, host: host ?? first?.host ?? '127.0.0.1', port: port ?? first?.port ?? 5432 }
  })

const clientTls = z.strictObject({
  cert: z.string().min(1),
  key: z.string().min(1),
})

const limits = z.strictObject({
  maxClientConnections: z.number().int().positive().default(1000),
  maxMessageBytes: z
    .number()
    .int()
    .min(1024)
    .max(1024 * 1024 * 1024)
    .default(268435456),
  startupTimeoutMs: z.number().int().positive().default(10000),
  shutdownTimeoutMs: z.number().int().nonnegative().default(30000),
  /** A request with no answer from the server for this long ends its session (0: off). */
  queryTimeoutMs: z.number().int().nonnegative().default(0),
  /** A session idle inside a transaction for this long is ended (0: off). */
  idleTransactionTimeoutMs: z.number().int().nonnegative().default(0),
})

/** Keepalive probes on client and upstream sockets, so that a vanished peer is noticed. */
const tcpKeepalive = z.strictObject({
  enabled: z.boolean().default(true),
  idleMs: z.number().int().min(1000).default(30000),
  intervalMs: z.number().int().min(1000).default(10000),
  count: z.number().int().min(1).max(127).default(3),
})

const log = z.strictObject({
  level: z.enum(['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent']).default('info'),
})

/** `[schema.]table`, as written in the config: matched later the way PostgreSQL resolves names. */
const fencedTable = z.strictObject({
  name: z.string().min(1),
  column: z.string().min(1).default('fencing_token'),
  requireToken: z.boolean().default(true),
})

/** A custom setting name such as app.fencing_token. */
const customSetting = z
  .string()
  .regex(
    /^[A-Za-z_][A-Za-z0-9_$]*\.[A-Za-z_][A-Za-z0-9_$]*$/,
    'must be a custom setting like app.fencing_token',
  )
const commentKey = z.string().regex(/^[A-Za-z_][A-Za-z0-9_.-]*$/)

/**
 * One lock fencing a set of tables: every write to them checks and raises the fence of one
 * resource, named here (`resource`) or by the session (`resourceFrom: session`).
 */
const resourceRule = z
  .strictObject({
    tables: z.array(z.string().min(1)).min(1),
    resource: z.string().min(1).optional(),
    resourceFrom: z.literal('session').optional(),
  })
  .refine((rule) => (rule.resource === undefined) !== (rule.resourceFrom === undefined), {
    message: 'give exactly one of resource (a fixed name) or resourceFrom: session',
  })

/** The session setting that holds the fencing token unless the config names another. */
export const defaultTokenSetting = 'app.fencing_token'

const fencing = z
  .strictObject({
    setting: customSetting.default(defaultTokenSetting),
    commentKey: commentKey.default('fencing_token'),
    resourceSetting: customSetting.default('app.fencing_resource'),
    resourceCommentKey: commentKey.default('fencing_resource'),
    /**
     * Refuse (PF400) tokens above the highest one `pgfence.next_token()` has issued. Off by
     * default: tokens may come from other issuers (etcd revisions, ZooKeeper zxids) that
     * pgfence's sequence knows nothing about.
     */
    rejectUnissuedTokens: z.boolean().default(false),
    tables: z.array(fencedTable).default([]),
    resources: z.array(resourceRule).default([]),
  })
  .superRefine((value, ctx) => {
    for (const issue of overlappingRules(value.tables, value.resources)) ctx.addIssue({ ...issue })
  })

/** Operations: the HTTP endpoint (/metrics, /healthz, /readyz) and the admin console's users. */
const admin = z.strictObject({
  listen: z
    .strictObject({
      host: z.string().min(1).default('127.0.0.1'),
      port: listenPort.default(9930),
    })
    .optional(),
  /** May use the admin console (database pgfence), after logging in as PostgreSQL checks it. */
  users: z.array(z.string().min(1)).default([]),
})

/** Server connections shared by clients (src/pool): none keeps one per client. */
const pool = z.strictObject({
  mode: z.enum(['none', 'session', 'transaction']).default('none'),
  size: z.number().int().positive().default(20),
  minIdle: z.number().int().nonnegative().default(0),
  idleTimeoutMs: z.number().int().positive().default(600000),
  maxLifetimeMs: z.number().int().positive().default(3600000),
  waitTimeoutMs: z.number().int().positive().default(10000),
})

/** Client authentication by pgfence, when it pools (src/auth). */
const auth = z.strictObject({
  file: z.string().min(1).optional(),
  query: z.string().min(1).optional(),
  user: z.string().min(1).optional(),
})

export const configSchema = z
  .strictObject({
    listen: listen.default(listen.parse({})),
    upstream: upstream.default(upstream.parse({})),
    tls: clientTls.optional(),
    limits: limits.default(limits.parse({})),
    tcpKeepalive: tcpKeepalive.default(tcpKeepalive.parse({})),
    log: log.default(log.parse({})),
    fencing: fencing.default(fencing.parse({})),
    /**
     * native: plain-TCP sessions are relayed by the compiled relay once authenticated (when it was
     * built at install); node: every byte goes through JavaScript.
     */
    relay: z.enum(['native', 'node']).default('native'),
    pool: pool.default(pool.parse({})),
    auth: auth.default({}),
    /** Absent: no HTTP endpoint and no admin console. */
    admin: admin.optional(),
  })
  .superRefine((value, ctx) => {
    const issue = (path: string[], message: string) =>
      ctx.addIssue({ code: 'custom', path, message })
    if (value.pool.minIdle > value.pool.size)
      issue(['pool', 'minIdle'], 'must not exceed pool.size')
    if (value.auth.query && !value.auth.user)
      issue(['auth', 'user'], 'auth.query runs as auth.user')
    if (value.pool.mode !== 'none' && !value.auth.file && !value.auth.query)
      issue(['auth'], `pool.mode ${value.pool.mode} needs auth.file or auth.query`)
  })

export type Config = z.infer<typeof configSchema>
export type UpstreamConfig = Config['upstream']

/** The config in force, read when used: a reload replaces it. */
export interface ConfigInForce {
  readonly config: Config
}
export type TcpKeepaliveConfig = z.infer<typeof tcpKeepalive>
export type FencedTableConfig = z.infer<typeof fencedTable>
export type AdminConfig = z.infer<typeof admin>
export type FencingConfig = z.infer<typeof fencing>
export type PoolConfig = z.infer<typeof pool>
export type AuthConfig = z.infer<typeof auth>
export type ResourceRuleConfig = z.infer<typeof resourceRule>
