import { describe, expect, it } from 'vitest'
import { greeting, parameterStatuses } from '../../src/wire/messages.js'
import { decodeParameterStatus } from '../../src/wire/parameter-status.js'
import { BackendScanner } from '../../src/wire/backend-scanner.js'
import { randomBytes } from '../../src/auth/random-block.js'
import { typed } from './frames.js'

describe('greeting', () => {
  const parameters: [string, string][] = [
    ['application_name', 'naïve €'],
    ['DateStyle', 'ISO, MDY'],
    ['standard_conforming_strings', 'on'],
  ]
  const head = typed('R', Buffer.from([0, 0, 0, 0]))
  const key = { processId: 0x01020304, secretKey: 0x05060708 }

  it('is the head, a ParameterStatus per parameter, BackendKeyData and ReadyForQuery, whole', () => {
    const bytes = greeting(head, parameterStatuses(parameters), key)
    const types: string[] = []
    const statuses: [string, string][] = []
    let ready = 0
    const scanner = new BackendScanner(
      (message) => {
        const { name, value } = decodeParameterStatus(message)
        statuses.push([name, value])
        return undefined
      },
      (status) => (ready = status),
    )
    scanner.scan(bytes)
    for (let pos = 0; pos < bytes.length; pos += 1 + bytes.readUInt32BE(pos + 1))
      types.push(String.fromCharCode(bytes[pos]!))
    expect(types).toEqual(['R', 'S', 'S', 'S', 'K', 'Z'])
    expect(scanner.atBoundary()).toBe(true)
    expect(statuses).toEqual(parameters)
    expect(ready).toBe(0x49) // 'I'
    expect(bytes.subarray(0, head.length)).toEqual(head)
    const keyAt = bytes.length - 6 - 8
    expect(bytes.subarray(keyAt, keyAt + 8)).toEqual(Buffer.from('0102030405060708', 'hex'))
  })
})

describe('randomBytes from a block', () => {
  it('gives the length asked, across block boundaries and beyond a block', () => {
    const values = Array.from({ length: 600 }, () => randomBytes(18).toString('hex'))
    expect(values.every((value) => value.length === 36)).toBe(true)
    expect(new Set(values).size).toBe(values.length)
    expect(randomBytes(10000)).toHaveLength(10000)
  })
})
