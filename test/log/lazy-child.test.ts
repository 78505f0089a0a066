import { Writable } from 'node:stream'
import { pino } from 'pino'
import { describe, expect, it, vi } from 'vitest'
import { lazyChild } from '../../src/log.js'

/** A pino logger at `level` whose lines are kept, parsed. */
function collecting(level: string) {
  const lines: Record<string, unknown>[] = []
  const destination = new Writable({
    write(chunk: Buffer, _encoding, done) {
      lines.push(JSON.parse(chunk.toString()) as Record<string, unknown>)
      done()
    },
  })
  return { logger: pino({ level }, destination), lines }
}

describe('lazyChild', () => {
  it('logs with the bindings at enabled levels and makes one child', () => {
    const { logger, lines } = collecting('info')
    const child = vi.spyOn(logger, 'child')
    const bindings = vi.fn(() => ({ conn: 7, user: 'alice' }))
    const log = lazyChild(logger, bindings)
    log.debug('not shown')
    expect(child).not.toHaveBeenCalled()
    expect(bindings).not.toHaveBeenCalled()
    log.info({ code: '08006' }, 'first')
    log.warn('second')
    log.error({ err: 'x' }, 'third')
    expect(child).toHaveBeenCalledTimes(1)
    expect(bindings).toHaveBeenCalledTimes(1)
    expect(lines.map(({ msg, conn, user, level }) => ({ msg, conn, user, level }))).toEqual([
      { msg: 'first', conn: 7, user: 'alice', level: 30 },
      { msg: 'second', conn: 7, user: 'alice', level: 40 },
      { msg: 'third', conn: 7, user: 'alice', level: 50 },
    ])
    expect(lines[0]!.code).toBe('08006')
  })

  it('makes no child while nothing is logged at an enabled level', () => {
    const { logger, lines } = collecting('warn')
    const child = vi.spyOn(logger, 'child')
    const bindings = vi.fn(() => ({ conn: 1 }))
    const log = lazyChild(logger, bindings)
    log.debug('quiet')
    log.info('quiet')
    expect(child).not.toHaveBeenCalled()
    expect(bindings).not.toHaveBeenCalled()
    expect(lines).toEqual([])
  })
})
