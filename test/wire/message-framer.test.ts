import { describe, expect, it } from 'vitest'
import { MessageFramer } from '../../src/wire/message-framer.js'
import type { PgError } from '../../src/wire/error-response.js'
import { interceptedTypeTable } from '../../src/relay/intercepted-types.js'

const REWRITTEN_TYPES = interceptedTypeTable({ statements: true, bind: false })
const TERMINATE_ONLY = interceptedTypeTable({ statements: false, bind: false })
import { parse, query, splits, sync, typed } from './frames.js'

function run(chunks: Buffer[], intercept = REWRITTEN_TYPES, max = 1 << 20) {
  const out: Buffer[] = []
  const intercepted: Buffer[] = []
  const errors: PgError[] = []
  const framer = new MessageFramer(
    {
      // Copies: forwarded views are only valid until written.
      forward: (bytes) => out.push(Buffer.from(bytes)),
      intercept: (message) => {
        intercepted.push(Buffer.from(message))
        out.push(Buffer.from(message))
      },
      fail: (error) => errors.push(error),
    },
    max,
    intercept,
  )
  for (const chunk of chunks) framer.push(chunk)
  return { out: Buffer.concat(out), intercepted, errors }
}

const bind = typed('B', Buffer.from('\0\0\0\0\0\0\0\0', 'latin1'))
const copyData = typed('d', Buffer.alloc(300, 7))
const stream = Buffer.concat([
  query('SELECT 1'),
  parse('s1', 'UPDATE invoices SET status = $1', [25]),
  bind,
  copyData,
  typed('E', '\0\0\0\0\0'),
  sync(),
  query('SELECT 2; SELECT 3'),
])

describe('MessageFramer', () => {
  it('passes every byte through in order and intercepts whole Query and Parse messages, at every split', () => {
    let cases = 0
    for (const chunks of splits(stream)) {
      const { out, intercepted, errors } = run(chunks)
      expect(errors).toEqual([])
      expect(out.equals(stream)).toBe(true)
      expect(intercepted.map((m) => String.fromCharCode(m[0]!))).toEqual(['Q', 'P', 'Q'])
      expect(intercepted[1]!.equals(parse('s1', 'UPDATE invoices SET status = $1', [25]))).toBe(
        true,
      )
      cases++
    }
    expect(cases).toBeGreaterThan(stream.length)
  })

  it('intercepts nothing without a rewriter and forwards views of the input', () => {
    const forwarded: Buffer[] = []
    const framer = new MessageFramer(
      { forward: (b) => forwarded.push(b), intercept: () => {}, fail: () => {} },
      1 << 20,
      TERMINATE_ONLY,
    )
    framer.push(stream)
    expect(forwarded).toHaveLength(1)
    expect(forwarded[0]!.buffer).toBe(stream.buffer)
  })

  it('streams a large pass-through message without waiting for its end', () => {
    const forwarded: number[] = []
    const framer = new MessageFramer(
      { forward: (b) => forwarded.push(b.length), intercept: () => {}, fail: () => {} },
      1 << 20,
      REWRITTEN_TYPES,
    )
    framer.push(copyData.subarray(0, 100))
    expect(forwarded).toEqual([100])
  })

  it('rejects a declared length above the limit before buffering it', () => {
    const huge = Buffer.alloc(5)
    huge.write('Q', 0, 'latin1')
    huge.writeUInt32BE(0x7fffffff, 1)
    for (const chunks of splits(Buffer.concat([query('SELECT 1'), huge]))) {
      const { errors, intercepted } = run(chunks, REWRITTEN_TYPES, 1024)
      expect(errors.map((e) => e.code)).toEqual(['08P01'])
      expect(intercepted).toHaveLength(1)
    }
  })

  it('rejects lengths below four and unknown message types', () => {
    const short = Buffer.from([0x51, 0, 0, 0, 3])
    expect(run([short]).errors[0]!.message).toMatch(/invalid message length/)
    expect(run([typed('!', 'x')]).errors[0]!.message).toMatch(/invalid frontend message type/)
  })

  it('delivers nothing after a failure', () => {
    const { out } = run([typed('!', 'x'), query('SELECT 1')])
    expect(out.length).toBe(0)
  })
})
