import { z } from 'zod'

const port = z.number().int().min(1).max(65535)
// 0 asks the OS for a free port (tests, embedded runs).
const listenPort = z.number().int().min(0).max(65535)

const listen = z.strictObject({
  host: z.string().min(1).default('127.0.0.1'),
  port: listenPort.default(6432),
})

const upstream = z.strictObject({
  host: z.string().min(1).default('127.0.0.1'),
  port: port.default(5432),
  tls: z.enum(['disable', 'prefer', 'require', 'verify-full']).default('prefer'),
  ca: z.string().min(1).optional(),
  connectTimeoutMs: z.number().int().positive().default(5000),
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

const fencing = z.strictObject({
  setting: z
    .string()
    .regex(
      /^[A-Za-z_][A-Za-z0-9_$]*\.[A-Za-z_][A-Za-z0-9_$]*$/,
      'must be a custom setting like app.fencing_token',
    )
    .default('app.fencing_token'),
  commentKey: z
    .string()
    .regex(/^[A-Za-z_][A-Za-z0-9_.-]*$/)
    .default('fencing_token'),
  tables: z.array(fencedTable).default([]),
})

export const configSchema = z.strictObject({
  listen: listen.default(listen.parse({})),
  upstream: upstream.default(upstream.parse({})),
  tls: clientTls.optional(),
  limits: limits.default(limits.parse({})),
  log: log.default(log.parse({})),
  fencing: fencing.default(fencing.parse({})),
})

export type Config = z.infer<typeof configSchema>
export type FencedTableConfig = z.infer<typeof fencedTable>
export type FencingConfig = z.infer<typeof fencing>
