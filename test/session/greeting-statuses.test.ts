import { describe, expect, it } from 'vitest'
import { greetingStatuses, statusChanges } from '../../src/session/pooled-startup.js'
import { backendMessages } from '../e2e/support/wire.js'

/** The name and value of each ParameterStatus in `bytes`. */
function decoded(bytes: Buffer | null): [string, string][] {
  return backendMessages(bytes ?? Buffer.alloc(0)).map(({ type, body }) => {
    expect(type).toBe('S')
    const [name, value] = body.toString('utf8').split('\0')
    return [name!, value!]
  })
}

const server = new Map([
  ['application_name', ''],
  ['DateStyle', 'ISO, MDY'],
  ['server_version', '15.20'],
  ['standard_conforming_strings', 'on'],
])

describe('a pooled greeting', () => {
  it("is the server's parameters in its order, with the client's settings applied", () => {
    const statuses = greetingStatuses(server, [
      ['datestyle', 'German'],
      ['application_name', 'first'],
      ['application_name', 'last'],
    ])
    expect(decoded(statuses.encoded)).toEqual([
      ['application_name', 'last'],
      ['DateStyle', 'German'],
      ['server_version', '15.20'],
      ['standard_conforming_strings', 'on'],
    ])
    expect(statuses.scs).toBe('on')
  })

  it('is the same set for the same parameters and settings', () => {
    const settings: [string, string][] = [['application_name', 'same']]
    expect(greetingStatuses(new Map(server), settings)).toBe(greetingStatuses(server, settings))
  })

  it('is told after the fact only the parameters a lent connection reports otherwise', () => {
    const greeted = greetingStatuses(server, [['application_name', 'app']])
    const moved = new Map(server).set('server_version', '16.4').set('in_hot_standby', 'off')
    const now = greetingStatuses(moved, [['application_name', 'app']])
    expect(decoded(statusChanges(greeted.pairs, now.pairs))).toEqual([
      ['server_version', '16.4'],
      ['in_hot_standby', 'off'],
    ])
    expect(statusChanges(greeted.pairs, greeted.pairs)).toBeNull()
    const again = greetingStatuses(new Map(server), [['application_name', 'app']])
    expect(statusChanges(greeted.pairs, [...again.pairs])).toBeNull()
  })
})
