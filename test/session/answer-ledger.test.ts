import { describe, expect, test } from 'vitest'
import { AnswerLedger } from '../../src/session/answer-ledger.js'

// The server's answers as PostgreSQL frames them.
const answer = (type: string, body: Buffer = Buffer.alloc(0)): Buffer => {
  const head = Buffer.alloc(5)
  head.write(type, 0, 'latin1')
  head.writeInt32BE(body.length + 4, 1)
  return Buffer.concat([head, body])
}
const parseComplete = () => answer('1')
const closeComplete = () => answer('3')
const bindComplete = () => answer('2')
const commandComplete = (tag: string) => answer('C', Buffer.from(`${tag}\0`))
const errorResponse = () => answer('E', Buffer.from('SERROR\0C42601\0Msyntax\0\0'))
const readyForQuery = (status: string) => answer('Z', Buffer.from(status, 'latin1'))

/** The ledger and the statuses of the ReadyForQuery it let through. */
function ledger(): { answers: AnswerLedger; statuses: string[] } {
  const statuses: string[] = []
  return {
    answers: new AnswerLedger((status) => statuses.push(String.fromCharCode(status))),
    statuses,
  }
}

/** Which of `messages` reach the client, by type letter. */
const kept = (answers: AnswerLedger, messages: Buffer[]): string =>
  messages
    .filter((message) => answers.keep(message))
    .map((message) => String.fromCharCode(message[0]!))
    .join('')

describe('AnswerLedger', () => {
  test('a simple query is owed until its ReadyForQuery, whose status is heard', () => {
    const { answers, statuses } = ledger()
    answers.request()
    expect(answers.settled).toBe(false)
    expect(kept(answers, [commandComplete('SELECT 1')])).toBe('C')
    expect(answers.outstanding).toBe(1)
    expect(kept(answers, [readyForQuery('T')])).toBe('Z')
    expect(answers.outstanding).toBe(0)
    expect(answers.settled).toBe(true)
    expect(statuses).toEqual(['T'])
  })

  test("pgfence's own Close and Parse are answered to pgfence only, in order with the client's", () => {
    const { answers } = ledger()
    // A client Parse of a name the connection holds: pgfence's Close goes first.
    answers.completion(true)
    answers.completion(false)
    answers.sync()
    const out = kept(answers, [closeComplete(), parseComplete(), readyForQuery('I')])
    expect(out).toBe('1Z')
    expect(answers.settled).toBe(true)
  })

  test('an error skips the completions expected before the next Sync, not after it', () => {
    const { answers } = ledger()
    answers.completion(false) // Parse that fails
    answers.completion(true) // pgfence's Close, never answered: the server skips to the Sync
    answers.sync()
    answers.completion(true) // after the Sync: still answered
    answers.sync()
    const out = kept(answers, [
      errorResponse(),
      readyForQuery('I'),
      closeComplete(),
      readyForQuery('I'),
    ])
    expect(out).toBe('EZZ')
    expect(answers.settled).toBe(true)
  })

  test("a settings replay's answers, its ReadyForQuery included, stay with pgfence", () => {
    const { answers, statuses } = ledger()
    answers.ownRequest()
    answers.request()
    expect(answers.settled).toBe(false)
    const out = kept(answers, [
      commandComplete('SET'),
      readyForQuery('I'),
      commandComplete('SELECT 1'),
      readyForQuery('I'),
    ])
    expect(out).toBe('CZ')
    expect(statuses).toEqual(['I'])
    expect(answers.settled).toBe(true)
  })

  test('an extended query in flight is owed until the ReadyForQuery of its Sync', () => {
    const { answers } = ledger()
    answers.completion(false)
    expect(kept(answers, [parseComplete()])).toBe('1')
    expect(answers.settled).toBe(true)
    answers.sync()
    expect(kept(answers, [bindComplete(), commandComplete('SELECT 1')])).toBe('2C')
    expect(answers.settled).toBe(false)
    expect(kept(answers, [readyForQuery('I')])).toBe('Z')
    expect(answers.settled).toBe(true)
  })
})
