import { parseArgs } from 'node:util'
import { loadConfigFile, defaultConfig } from '../config/load.js'
import { createLogger } from '../log.js'
import { startProxy, type RunningProxy } from '../proxy/proxy-server.js'

/** `pgfence start --config FILE`: the proxy in the foreground until SIGTERM or SIGINT. */
export async function run(argv: string[]): Promise<number> {
  const { values } = parseArgs({ args: argv, options: { config: { type: 'string', short: 'c' } } })
  const config = values.config ? loadConfigFile(values.config) : defaultConfig()
  const logger = createLogger(config.log.level)
  let proxy: RunningProxy
  try {
    proxy = await startProxy(config, { logger, configFile: values.config, collectAfterChurn: true })
  } catch (err) {
    const reason = listenFailure(err as ListenError)
    if (reason === null) throw err
    process.stderr.write(`pgfence start: ${reason}\n`)
    return 1
  }
  // A refused reload is logged by the proxy; the running configuration stays.
  const reload = () => void proxy.reload().catch(() => {})
  process.on('SIGHUP', reload)
  await new Promise<void>((resolve) => {
    const stop = (signal: string) => {
      logger.info({ signal }, 'shutting down')
      process.off('SIGTERM', stop)
      process.off('SIGINT', stop)
      process.off('SIGHUP', reload)
      void proxy.close().then(resolve)
    }
    process.on('SIGTERM', stop)
    process.on('SIGINT', stop)
  })
  logger.info('stopped')
  return 0
}

type ListenError = NodeJS.ErrnoException & { address?: string; port?: number }

/** Why binding a listener failed, in one line naming the address; null for other errors. */
function listenFailure(err: ListenError): string | null {
  if (err.syscall !== 'listen') return null
  const where = err.port === undefined ? err.address : `${err.address}:${err.port}`
  const why = err.code === 'EADDRINUSE' ? 'already in use by another process' : err.message
  return `cannot listen on ${where}: ${why}`
}
