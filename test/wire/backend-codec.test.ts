import { describe, expect, it } from 'vitest'
import { BackendScanner } from '../../src/wire/backend-scanner.js'
import { decodeParameterStatus } from '../../src/wire/parameter-status.js'
import { AuthPhaseFilter } from '../../src/wire/auth-filter.js'
import {
  decodeErrorFields,
  decodeErrorResponse,
  encodeErrorResponse,
  PgError,
} from '../../src/wire/error-response.js'
import { Backend } from '../../src/wire/protocol.js'
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
      const scanner = new BackendScanner((m) => {
        read.push(
          m[0] === 0x45
            ? decodeErrorFields(m).code!
            : Object.values(decodeParameterStatus(m)).join('='),
        )
        return undefined
      })
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
        () => undefined,
        (status) => void read.push(String.fromCharCode(status)),
      )
      for (const chunk of chunks) scanner.scan(chunk)
      expect(read).toEqual(['I', 'T', 'E'])
    }
  })

  it('forwards every byte as it came, or an ErrorResponse as the reader replaced it, at every split', () => {
    const replacement = errorMessage('PF400')
    const expected = Buffer.concat([dataRow, replacement, ready, parameter, dataRow])
    for (const chunks of splits(stream)) {
      const plain = new BackendScanner(() => undefined)
      const replacing = new BackendScanner((m) => (m[0] === 0x45 ? replacement : undefined))
      const kept = Buffer.concat(chunks.map((chunk) => plain.scan(chunk)))
      const replaced = Buffer.concat(chunks.map((chunk) => replacing.scan(chunk)))
      expect(kept.equals(stream)).toBe(true)
      expect(replaced.equals(expected)).toBe(true)
    }
  })

  it('drops the CommandComplete right after a replaced NoticeResponse, at every split', () => {
    const notice = typed('N', 'SWARNING\0VWARNING\0C01000\0Mcanceling wait\0RSyncRepWaitForLSN\0\0')
    const other = typed('N', 'SNOTICE\0VNOTICE\0C00000\0Mhello\0\0')
    const complete = typed('C', 'COMMIT\0')
    const replacement = errorMessage('08007')
    const sent = Buffer.concat([other, complete, notice, complete, ready, notice, ready, complete])
    // Only the replaced notice's own CommandComplete goes; a later one stays.
    const expected = Buffer.concat([
      other,
      complete,
      replacement,
      ready,
      replacement,
      ready,
      complete,
    ])
    for (const chunks of splits(sent)) {
      const scanner = new BackendScanner((m) =>
        m[0] === 0x4e && decodeErrorFields(m).routine ? replacement : undefined,
      )
      const out = Buffer.concat(chunks.map((chunk) => scanner.scan(chunk)))
      expect(out.equals(expected)).toBe(true)
      expect(scanner.atBoundary()).toBe(true)
    }
  })

  it('holds an ErrorResponse back until it is whole, and passes other messages at once', () => {
    const scanner = new BackendScanner(() => undefined)
    const error = errorMessage('PF409')
    expect(scanner.scan(Buffer.concat([dataRow, error.subarray(0, 9)])).equals(dataRow)).toBe(true)
    expect(scanner.scan(error.subarray(9)).equals(error)).toBe(true)
    expect(scanner.scan(dataRow.subarray(0, 7)).equals(dataRow.subarray(0, 7))).toBe(true)
  })

  it('forwards a chunk whose messages were read and kept as a view of it, not a copy', () => {
    const scanner = new BackendScanner(() => undefined)
    const forwarded = scanner.scan(stream)
    expect(forwarded.equals(stream)).toBe(true)
    expect(forwarded.buffer).toBe(stream.buffer)
  })

  it('reports a length below four and forwards nothing after it, at every split', () => {
    const broken = Buffer.concat([dataRow, Buffer.from([0x44, 0, 0, 0, 2]), dataRow])
    for (const chunks of splits(broken)) {
      const errors: string[] = []
      const scanner = new BackendScanner(
        () => undefined,
        undefined,
        (error) => void errors.push(error.message),
      )
      const out = Buffer.concat(chunks.map((chunk) => scanner.scan(chunk)))
      expect(errors).toEqual(['invalid message length 2'])
      expect(out.equals(dataRow)).toBe(true)
    }
  })

  it('knows when it stands inside a message', () => {
    for (let cut = 1; cut < dataRow.length; cut++) {
      const scanner = new BackendScanner(() => undefined)
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

describe('decodeErrorResponse / encodeErrorResponse', () => {
  it('re-encodes every field in order, byte for byte, whatever the text encoding', () => {
    // A LATIN1 session's bytes are not UTF-8: latin1 reads and writes them one to one.
    const latin1 = typed(
      'E',
      Buffer.concat([
        Buffer.from('SERROR\0CPF409\0Mstale \xe9\0WPL/pgSQL line\nSQL "x"\0\0', 'latin1'),
      ]),
    )
    const fields = decodeErrorResponse(latin1, 'latin1')
    expect(fields.map(([key]) => key)).toEqual(['S', 'C', 'M', 'W'])
    expect(encodeErrorResponse(fields, 'latin1').equals(latin1)).toBe(true)
    const utf8 = errorMessage('PF428')
    expect(encodeErrorResponse(decodeErrorResponse(utf8)).equals(utf8)).toBe(true)
    const notice = encodeErrorResponse([['S', 'NOTICE']], 'utf8', Backend.NoticeResponse)
    expect(notice.equals(typed('N', 'SNOTICE\0\0'))).toBe(true)
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
