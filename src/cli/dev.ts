import { once } from 'node:events'
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import { parseConfig } from '../config/load.js'
import { createLogger } from '../log.js'
import { startProxy } from '../proxy/proxy-server.js'
import { demoDatabase, prepareDemoDatabase } from '../dev/demo-database.js'
import { startEmbeddedServer } from '../dev/embedded-postgres.js'
import { proxyOrListenFailure } from './listen-failure.js'

function tryItText(url: string, consoleUrl: string, metricsUrl: string): string {
  const psql = `psql "${url}"`
  return [
    'Try it (invoice 99 is at token 100):',
    `  ${psql} -c "SET app.fencing_token = 101" -c "UPDATE invoices SET status = 'PAID' WHERE id = 99"`,
    `  ${psql} -c "SET app.fencing_token = 100" -c "UPDATE invoices SET status = 'VOID' WHERE id = 99"  # stale: PF409`,
    `  ${psql} -c "SELECT id, status, fencing_token FROM invoices"`,
    'The admin console and the metrics:',
    `  psql "${consoleUrl}" -c 'SHOW FENCING'`,
    `  curl -s ${metricsUrl} | grep '^pgfence_fencing_rejections_total'`,
  ].join('\n')
}

export const usage = `usage: pgfence dev [--port N] [--admin-port N] [--data-dir DIR]

An embedded PostgreSQL with the demo database pgfence_demo, and the proxy in front of it
fencing invoices, until SIGINT or SIGTERM (what npm start runs).
  --port N         the proxy's port on 127.0.0.1 (default 6432; 0 picks a free one)
  --admin-port N   /metrics, /healthz and /readyz on 127.0.0.1 (default 9930; 0 picks one)
  --data-dir DIR   the embedded server's data (default ./.pgfence/postgres), kept between runs`

/**
 * `pgfence dev` (what `npm start` runs): an embedded PostgreSQL with a demo database and the
 * proxy in front of it, fencing `invoices`, until SIGINT or SIGTERM.
 */
export async function run(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      port: { type: 'string', default: '6432' },
      'admin-port': { type: 'string', default: '9930' },
      'data-dir': { type: 'string', default: join(process.cwd(), '.pgfence', 'postgres') },
    },
  })
  const dataDir = values['data-dir']
  const postgres = await startEmbeddedServer(dataDir)
  try {
    const config = parseConfig({
      listen: { host: '127.0.0.1', port: Number(values.port) },
      upstream: { host: '127.0.0.1', port: postgres.port, tls: 'disable' },
      limits: { shutdownTimeoutMs: 2000 },
      log: { level: 'warn' },
      fencing: { tables: [{ name: 'invoices' }] },
      admin: {
        listen: { host: '127.0.0.1', port: Number(values['admin-port']) },
        users: ['postgres'],
      },
    })
    await prepareDemoDatabase(postgres.url('postgres'), postgres.url(demoDatabase), config.fencing)
    const logger = createLogger(config.log.level)
    const proxy = await proxyOrListenFailure('dev', () =>
      startProxy(config, { logger, collectAfterChurn: true }),
    )
    if (!proxy) return 1
    const server = `postgres://postgres:postgres@${proxy.host}:${proxy.port}`
    const url = `${server}/${demoDatabase}`
    const metricsUrl = `http://${proxy.host}:${proxy.adminPort}/metrics`
    process.stdout.write(
      `pgfence dev: proxy on ${proxy.host}:${proxy.port} fencing invoices, ` +
        `embedded PostgreSQL in ${dataDir}\n` +
        `DATABASE_URL=${url}\n\n${tryItText(url, `${server}/pgfence`, metricsUrl)}\n\n` +
        'Ctrl-C stops.\n',
    )
    await Promise.race([once(process, 'SIGINT'), once(process, 'SIGTERM')])
    await proxy.close()
  } finally {
    await postgres.stop()
  }
  return 0
}
