import { describe, expect, it } from 'vitest'
import { unknownCommit } from '../../src/fencing/server-notices.js'
import { encodeErrorResponse, type ErrorField } from '../../src/wire/error-response.js'
import { Backend } from '../../src/wire/protocol.js'

const DETAIL =
  'The transaction has already committed locally, but might not have been replicated to the standby.'

const notice = (fields: ErrorField[]) => encodeErrorResponse(fields, 'utf8', Backend.NoticeResponse)

describe('unknownCommit', () => {
  it('reads a cancelled wait for the standby by the fields PostgreSQL never translates', () => {
    // lc_messages = de: the texts are German, severity V and routine R are not.
    const german = notice([
      ['S', 'WARNUNG'],
      ['V', 'WARNING'],
      ['C', '01000'],
      ['M', 'Warten auf synchrone Replikation wird storniert wegen Benutzeraufforderung'],
      [
        'D',
        'Die Transaktion wurde lokal bereits committet, aber möglicherweise nicht zum Standby repliziert.',
      ],
      ['F', 'syncrep.c'],
      ['R', 'SyncRepWaitForLSN'],
    ])
    const error = unknownCommit(german)
    expect(error).toMatchObject({ code: '08007', severity: 'ERROR' })
    expect(error?.message).toContain('may not have reached the synchronous standby')
    expect(error?.detail).toContain('Warten auf synchrone Replikation')
  })

  it('is FATAL when the backend terminates too (57P01), and reads the English DETAIL without a routine', () => {
    const terminated = notice([
      ['S', 'WARNING'],
      ['V', 'WARNING'],
      ['C', '57P01'],
      [
        'M',
        'canceling the wait for synchronous replication and terminating connection due to administrator command',
      ],
      ['D', DETAIL],
    ])
    expect(unknownCommit(terminated)).toMatchObject({ code: '08007', severity: 'FATAL' })
  })

  it('leaves every other notice alone', () => {
    const raised = (severity: string, routine: string, detail = DETAIL) =>
      notice([
        ['S', severity],
        ['V', severity],
        ['C', '01000'],
        ['M', 'from a function'],
        ['D', detail],
        ['R', routine],
      ])
    // RAISE NOTICE and RAISE WARNING with the same DETAIL: another routine.
    expect(unknownCommit(raised('NOTICE', 'SyncRepWaitForLSN'))).toBeNull()
    expect(unknownCommit(raised('WARNING', 'exec_stmt_raise'))).toBeNull()
  })
})
