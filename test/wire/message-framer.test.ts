import { describe, expect, it } from 'vitest'
import {
  EVERY_TYPE,
  FROM_CLIENT,
  FROM_SERVER,
  MessageFramer,
} from '../../src/wire/message-framer.js'
import type { PgError } from '../../src/wire/error-response.js'
import { interceptedTypeTable } from '../../src/relay/intercepted-types.js'

const REWRITTEN_TYPES = interceptedTypeTable({ statements: true, bind: false })
const TERMINATE_ONLY = interceptedTypeTable({ statements: false, bind: false })
import { parse, query, splits, sync, typed } from './frames.js'
import { typeTable } from '../../src/wire/protocol.js'

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
    FROM_CLIENT,
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
      FROM_CLIENT,
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
      FROM_CLIENT,
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

describe('MessageFramer from the server', () => {
  const dataRow = typed('D', Buffer.concat([Buffer.from([0, 1, 0, 0, 0, 3]), Buffer.from('abc')]))
  const ready = typed('Z', 'I')
  const messages = [
    typed('1', ''),
    typed('T', Buffer.alloc(40, 1)),
    dataRow,
    typed('C', 'SELECT 1\0'),
    typed('N', 'SNOTICE\0Mhello\0\0'),
    ready,
    // Not a type a client may send: the server's types are not checked.
    typed('v', Buffer.alloc(8)),
  ]
  const stream = Buffer.concat(messages)

  /** Frames `chunks` into whole messages (copied: views are valid until written). */
  function frame(chunks: Buffer[], stopAt?: number) {
    const whole: Buffer[] = []
    const errors: PgError[] = []
    const framer: MessageFramer = new MessageFramer(
      {
        forward: () => errors.push(new Error('forwarded') as PgError),
        intercept: (message) => {
          whole.push(Buffer.from(message))
          if (message[0] === stopAt) framer.stop()
        },
        fail: (error) => errors.push(error),
      },
      Infinity,
      EVERY_TYPE,
      FROM_SERVER,
    )
    const framed = chunks.map((chunk) => framer.push(chunk))
    return { whole, errors, framed, framer }
  }

  it('frames every message whole, at every split', () => {
    let cases = 0
    for (const chunks of splits(stream)) {
      const { whole, errors, framer } = frame(chunks)
      expect(errors).toEqual([])
      expect(whole).toEqual(messages)
      expect(framer.atBoundary()).toBe(true)
      cases++
    }
    expect(cases).toBeGreaterThan(stream.length)
  })

  it('hands a message whole within a chunk over as a view of it, not a copy', () => {
    const views: Buffer[] = []
    const framer = new MessageFramer(
      { forward: () => {}, intercept: (m) => views.push(m), fail: () => {} },
      Infinity,
      EVERY_TYPE,
      FROM_SERVER,
    )
    framer.push(stream)
    expect(views.map((view) => view.buffer)).toEqual(messages.map(() => stream.buffer))
  })

  it('stops after the message the reader stops at, and says where, at every split', () => {
    const upToReady = messages.indexOf(ready) + 1
    const rest = Buffer.concat(messages.slice(upToReady))
    for (const chunks of splits(stream)) {
      const { whole, framed, framer } = frame(chunks, ready[0])
      expect(whole).toEqual(messages.slice(0, upToReady))
      expect(framer.atBoundary()).toBe(true)
      // The chunk the ReadyForQuery ended in, from where it ended, then the chunks after it.
      const stoppedIn = framed.findIndex((n, i) => n < chunks[i]!.length || i === framed.length - 1)
      const after = Buffer.concat([
        chunks[stoppedIn]!.subarray(framed[stoppedIn]),
        ...chunks.slice(stoppedIn + 1),
      ])
      expect(after.equals(rest)).toBe(true)
      expect(framed.slice(stoppedIn + 1).every((n) => n === 0)).toBe(true)
    }
  })

  it('passes a message above the limit on unread, even of an intercepted type', () => {
    const large = typed('E', Buffer.alloc(100, 0x41))
    const small = typed('E', 'SERROR\0\0')
    const sent = Buffer.concat([small, large, small])
    for (const chunks of splits(sent)) {
      const forwarded: Buffer[] = []
      const read: Buffer[] = []
      const framer = new MessageFramer(
        {
          forward: (bytes) => forwarded.push(Buffer.from(bytes)),
          intercept: (message) => read.push(Buffer.from(message)),
          fail: () => {},
        },
        64,
        typeTable([0x45]),
        FROM_SERVER,
      )
      for (const chunk of chunks) framer.push(chunk)
      expect(read).toEqual([small, small])
      expect(Buffer.concat(forwarded).equals(large)).toBe(true)
    }
  })

  it('fails on a length below four, at every split', () => {
    const broken = Buffer.concat([ready, Buffer.from([0x44, 0, 0, 0, 3]), ready])
    for (const chunks of splits(broken)) {
      const { whole, errors } = frame(chunks)
      expect(errors.map((e) => e.message)).toEqual(['invalid message length 3'])
      expect(whole).toEqual([ready])
    }
  })
})
