import { parseArgs } from 'node:util'
import { loadConfigFile } from '../config/load.js'
import { createLogger } from '../log.js'
import { fencesNothing } from '../fencing/fencing.js'
import { startProxy } from '../proxy/proxy-server.js'
import { proxyOrListenFailure } from './listen-failure.js'

export const usage = `usage: pgfence start --config FILE

Runs the proxy in the foreground: JSON logs on stdout, SIGHUP reloads the config, SIGTERM or
SIGINT drain the sessions and exit 0.
  -c, --config FILE   the YAML config, required
(without a config no table is fenced; \`npm start\` runs a demo database that needs none)`

/** `pgfence start --config FILE`: the proxy in the foreground until SIGTERM or SIGINT. */
export async function run(argv: string[]): Promise<number> {
  const { values } = parseArgs({ args: argv, options: { config: { type: 'string', short: 'c' } } })
  // A proxy that fences nothing is never what `start` is for: it is refused rather than run.
  if (!values.config) {
    process.stderr.write(`${usage}\n`)
    return 2
  }
  const config = loadConfigFile(values.config)
  const logger = createLogger(config.log.level)
  if (fencesNothing(config.fencing)) {
    logger.warn(
      { config: values.config },
      'the config fences no table: every statement passes through unchanged',
    )
  }
  // Signals are taken before the port is bound: a SIGTERM right after the 'listening' line
  // drains the proxy instead of killing the process.
  const signal = new Promise<string>((resolve) => {
    const stop = (name: string) => {
      process.off('SIGTERM', stop)
      process.off('SIGINT', stop)
      resolve(name)
    }
    process.on('SIGTERM', stop)
    process.on('SIGINT', stop)
  })
  const proxy = await proxyOrListenFailure('start', () =>
    startProxy(config, { logger, configFile: values.config, collectAfterChurn: true }),
  )
  if (!proxy) return 1
  // A refused reload is logged by the proxy; the running configuration stays.
  const reload = () => void proxy.reload().catch(() => {})
  process.on('SIGHUP', reload)
  logger.info({ signal: await signal }, 'shutting down')
  process.off('SIGHUP', reload)
  await proxy.close()
  logger.info('stopped')
  return 0
}
