import { describe, expect, it } from 'vitest'
import { cutError } from '../../src/proxy/cut-outcome.js'
import { RequestTracker } from '../../src/proxy/request-progress.js'
import { parse, query, sync, typed } from '../wire/frames.js'

const bind = (statement: string) =>
  typed('B', Buffer.from(`\0${statement}\0\0\0\0\0\0\0`, 'latin1'))

/** Feeds whole client messages, then the server's ReadyForQuery statuses. */
function track(messages: Buffer[], statuses = ''): RequestTracker {
  const tracker = new RequestTracker()
  for (const message of messages) tracker.clientMessage(message, 0, message.length)
  for (const status of statuses) tracker.readyForQuery(status.charCodeAt(0))
  return tracker
}

describe('RequestTracker', () => {
  it('counts Query and Sync until their ReadyForQuery, and keeps the last status', () => {
    const tracker = track([query('BEGIN'), parse('', 'SELECT 1'), sync(), query('SELECT 2')], 'T')
    expect(tracker.snapshot()).toMatchObject({ outstanding: 2, status: 'T', mayCommit: false })
    tracker.readyForQuery('T'.charCodeAt(0))
    tracker.readyForQuery('I'.charCodeAt(0))
    expect(tracker.snapshot()).toMatchObject({ outstanding: 0, status: 'I' })
  })

  it('counts a FunctionCall as a request', () => {
    const call = typed('F', Buffer.alloc(12))
    expect(track([call]).snapshot().outstanding).toBe(1)
    expect(track([call], 'I').snapshot().outstanding).toBe(0)
  })

  it('sees COMMIT and END as words, in any case, in Query and Parse', () => {
    for (const text of ['commit', "COMMIT PREPARED 'x'", 'UPDATE t SET a = 1; End', 'end;'])
      expect(track([query(text)]).snapshot().mayCommit).toBe(true)
    expect(track([parse('', 'COMMIT'), sync()]).snapshot().mayCommit).toBe(true)
    for (const text of ['SELECT committed FROM t', 'SELECT weekend', 'UPDATE t SET x_end = 1'])
      expect(track([query(text)]).snapshot().mayCommit).toBe(false)
  })

  it('counts any Bind as a possible COMMIT once a named statement may be one', () => {
    const tracker = track([parse('done', 'COMMIT'), sync()], 'T')
    expect(tracker.snapshot().mayCommit).toBe(false)
    tracker.clientMessage(bind('other'), 0, bind('other').length)
    expect(tracker.snapshot().mayCommit).toBe(true)
  })

  it('takes a message it cannot see whole for a possible COMMIT', () => {
    const tracker = new RequestTracker()
    const message = query('SELECT 1')
    tracker.clientMessage(message, 0, 7)
    expect(tracker.snapshot()).toMatchObject({ outstanding: 1, mayCommit: true })
  })
})

describe('cutError', () => {
  const progress = (outstanding: number, status: string, mayCommit = false) => ({
    outstanding,
    status,
    mayCommit,
    quietMs: 0,
    transactions: 0,
  })

  it('says 08007 whenever a statement that may commit is in flight', () => {
    for (const reason of ['shutdown', 'queryTimeout', 'upstreamLost'] as const) {
      expect(cutError(reason, progress(1, 'I')).code).toBe('08007')
      expect(cutError(reason, progress(1, 'T', true)).code).toBe('08007')
    }
  })

  it('says what PostgreSQL would when nothing can have committed', () => {
    expect(cutError('shutdown', progress(0, 'T')).code).toBe('57P01')
    expect(cutError('shutdown', progress(1, 'T')).code).toBe('57P01')
    expect(cutError('queryTimeout', progress(1, 'E')).code).toBe('57014')
    expect(cutError('idleTransactionTimeout', progress(0, 'T')).code).toBe('25P03')
    expect(cutError('upstreamLost', progress(0, 'I')).code).toBe('08006')
    expect(cutError('shutdown', null).code).toBe('57P01')
  })
})
