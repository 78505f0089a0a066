import { pino, type Logger } from 'pino'

export type { Logger }

/** JSON logs on stdout; secrets never reach a binding, and redaction catches slips. */
export function createLogger(level: string): Logger {
  return pino({
    level,
    base: { service: 'pgfence' },
    redact: ['password', '*.password', 'token', '*.token'],
  })
}
