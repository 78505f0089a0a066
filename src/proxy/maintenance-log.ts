import type { Logger } from '../log.js'
import { maintenanceNeedle } from '../rewrite/statement-marker.js'
import { encodingOf } from './statement-interceptor.js'

/**
 * Logs (info) a Query or Parse whose text names pgfence.maintenance: the statements that switch
 * the fence off for a session (SET, SET LOCAL, set_config) and back on. The rewriter's needles
 * send every such text here, also from the native relay.
 */
export function logMaintenanceStatement(message: Buffer, logger: Logger): void {
  const body = message.subarray(5)
  if (!body.toString('latin1').toLowerCase().includes(maintenanceNeedle)) return
  // Query: text\0; Parse: name\0text\0...
  const statement = body
    .toString(encodingOf(body))
    .split('\0')
    .find((part) => part.toLowerCase().includes(maintenanceNeedle))
  logger.info({ statement }, 'pgfence.maintenance statement')
}
