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

/** What a session's code logs with: a Logger, or a lazyChild of one. */
export type LevelLogger = Pick<Logger, 'debug' | 'info' | 'warn' | 'error'>

type Level = keyof LevelLogger

/**
 * A child logger made when something is first logged at an enabled level: most sessions log
 * nothing, and a pino child costs microseconds per login (its bindings are serialised).
 */
class LazyChild {
  private child: Logger | undefined

  constructor(
    private readonly parent: Logger,
    private readonly bindings: () => Record<string, unknown>,
  ) {}

  debug(...args: unknown[]): void {
    this.log('debug', args)
  }

  info(...args: unknown[]): void {
    this.log('info', args)
  }

  warn(...args: unknown[]): void {
    this.log('warn', args)
  }

  error(...args: unknown[]): void {
    this.log('error', args)
  }

  private log(level: Level, args: unknown[]): void {
    if (!this.child && !this.parent.isLevelEnabled(level)) return
    this.child ??= this.parent.child(this.bindings())
    ;(this.child[level] as (...args: unknown[]) => void)(...args)
  }
}

/**
 * `parent.child(bindings())`, made only once something is logged at a level `parent` enables (the
 * bindings too: one may cost a system call).
 */
export const lazyChild = (parent: Logger, bindings: () => Record<string, unknown>): LevelLogger =>
  new LazyChild(parent, bindings) as unknown as LevelLogger
