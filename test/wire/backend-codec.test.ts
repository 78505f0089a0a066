import { describe, expect, it } from 'vitest'
import { BackendScanner } from '../../src/wire/backend-scanner.js'
import { decodeParameterStatus } from '../../src/wire/parameter-status.js'
import { AuthPhaseFilter } from '../../src/wire/auth-filter.js'
import { decodeErrorFields, PgError } from '../../src/wire/error-response.js'
import { splits, typed } from './frames.js'

const int32 = (value: number): Buffer => {
  const b = Buffer.alloc(4)
  b.writeUInt32BE(value)
  return b
}
const errorMessage = (code: string, severity = 'ERROR') =>
  typed('E', `S${severity}\0V${severity}\0C${code}\0Mstale fencing token\0tinvoices\0\0`)
const ready = typed('Z', 'I')
const dataRow = typed('D', Buffer.concat([Buffer.from([0, 1]), int32(3), Buffer.from('abc')]))

describe('BackendScanner', () => {
  const parameter = typed('S', 'standard_conforming_strings\0off\0')
  const stream = Buffer.concat([dataRow, errorMessage('PF409'), ready, parameter, dataRow])

  it('follows boundaries and reads each ErrorResponse and ParameterStatus once, at every split', () => {
    for (const chunks of splits(stream)) {
      const read: string[] = []
      const scanner = new BackendScanner((m) =>
        read.push(
          m[0] === 0x45
            ? decodeErrorFields(m).code!
            : Object.values(decodeParameterStatus(m)).join('='),
        ),
      )
      for (const chunk of chunks) scanner.scan(chunk)
      expect(read).toEqual(['PF409', 'standard_conforming_strings=off'])
      expect(scanner.atBoundary()).toBe(true)
    }
  })

  it('reads the status of every ReadyForQuery, at every split', () => {
    const statuses = Buffer.concat([
      ready,
      dataRow,
      typed('Z', 'T'),
      errorMessage('42P01'),
      typed('Z', 'E'),
    ])
    for (const chunks of splits(statuses)) {
      const read: string[] = []
      const scanner = new BackendScanner(
        () => {},
        (status) => read.push(String.fromCharCode(status)),
      )
      for (const chunk of chunks) scanner.scan(chunk)
      expect(read).toEqual(['I', 'T', 'E'])
    }
  })

  it('knows when it stands inside a message', () => {
    for (let cut = 1; cut < dataRow.length; cut++) {
      const scanner = new BackendScanner(() => {})
      scanner.scan(dataRow.subarray(0, cut))
      expect(scanner.atBoundary()).toBe(false)
    }
  })
})

describe('decodeErrorFields / PgError', () => {
  it('round-trips the fields of an ErrorResponse', () => {
    const encoded = new PgError('08006', 'upstream gone', 'FATAL', 'detail text').encode()
    expect(encoded.readUInt32BE(1)).toBe(encoded.length - 1)
    expect(decodeErrorFields(encoded)).toEqual({
      severity: 'FATAL',
      code: '08006',
      message: 'upstream gone',
      detail: 'detail text',
    })
    expect(decodeErrorFields(errorMessage('PF409')).table).toBe('invoices')
  })
})

describe('AuthPhaseFilter', () => {
  const sasl = typed(
    'R',
    Buffer.concat([int32(10), Buffer.from('SCRAM-SHA-256-PLUS\0SCRAM-SHA-256\0\0')]),
  )
  const ok = typed('R', int32(0))
  const status = typed('S', 'server_version\x0015\0')
  const stream = Buffer.concat([sasl, ok, status, ready, dataRow])

  it('drops SCRAM-SHA-256-PLUS and hands over everything after ReadyForQuery, at every split', () => {
    const expected = typed('R', Buffer.concat([int32(10), Buffer.from('SCRAM-SHA-256\0\0')]))
    for (const chunks of splits(stream)) {
      const filter = new AuthPhaseFilter()
      const forwarded: Buffer[] = []
      let rest: Buffer | null = null
      for (const chunk of chunks) {
        if (rest !== null) {
          rest = Buffer.concat([rest, chunk])
          continue
        }
        const result = filter.push(chunk)
        forwarded.push(...result.forward)
        rest = result.rest
      }
      expect(Buffer.concat(forwarded).equals(Buffer.concat([expected, ok, status, ready]))).toBe(
        true,
      )
      expect(rest?.equals(dataRow)).toBe(true)
    }
  })
})
