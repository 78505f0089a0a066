import { describe, expect, it } from 'vitest'
import { decodeStartupPacket, startupPacketLength } from '../../src/wire/startup-packet.js'

function startup(params: Record<string, string>, version = 196608): Buffer {
  const body = Object.entries(params)
    .map(([k, v]) => `${k}\0${v}\0`)
    .join('')
  const payload = Buffer.from(`${body}\0`)
  const head = Buffer.alloc(8)
  head.writeUInt32BE(payload.length + 8, 0)
  head.writeUInt32BE(version, 4)
  return Buffer.concat([head, payload])
}

const request = (code: number, length = 8): Buffer => {
  const b = Buffer.alloc(length)
  b.writeUInt32BE(length, 0)
  b.writeUInt32BE(code, 4)
  return b
}

describe('startup packets', () => {
  it('decodes a StartupMessage with every parameter', () => {
    const packet = decodeStartupPacket(
      startup({ user: 'app', database: 'billing', options: '-c app.fencing_token=5' }),
    )
    expect(packet.kind).toBe('startup')
    if (packet.kind !== 'startup') return
    expect(Object.fromEntries(packet.params)).toEqual({
      user: 'app',
      database: 'billing',
      options: '-c app.fencing_token=5',
    })
  })

  it('recognises SSL, GSS and cancel requests', () => {
    expect(decodeStartupPacket(request(80877103)).kind).toBe('ssl')
    expect(decodeStartupPacket(request(80877104)).kind).toBe('gssenc')
    expect(decodeStartupPacket(request(80877102, 16)).kind).toBe('cancel')
    expect(() => decodeStartupPacket(request(80877102, 12))).toThrow(/cancel request/)
  })

  it('keeps a newer minor version for the server to negotiate, refuses another major', () => {
    const packet = decodeStartupPacket(startup({ user: 'u' }, (3 << 16) | 2))
    expect(packet.kind === 'startup' && packet.minor).toBe(2)
    expect(() => decodeStartupPacket(startup({ user: 'u' }, 2 << 16))).toThrow(
      /unsupported frontend protocol/,
    )
  })

  it('checks the length word before anything else', () => {
    expect(startupPacketLength(Buffer.from([0, 0]))).toBe(0)
    expect(() => startupPacketLength(Buffer.from([0x7f, 0xff, 0xff, 0xff]))).toThrow(
      /invalid length/,
    )
    expect(() => startupPacketLength(Buffer.from([0, 0, 0, 7]))).toThrow(/invalid length/)
    expect(startupPacketLength(Buffer.from([0, 0, 0x27, 0x10]))).toBe(10000)
    expect(() => startupPacketLength(Buffer.from([0, 0, 0x27, 0x11]))).toThrow(/invalid length/)
  })

  it('refuses malformed parameter lists and a missing user', () => {
    const truncated = startup({ user: 'u' }).subarray(0, -1)
    truncated.writeUInt32BE(truncated.length, 0)
    expect(() => decodeStartupPacket(truncated)).toThrow(/startup packet layout/)
    expect(() => decodeStartupPacket(startup({ database: 'x' }))).toThrow(/no PostgreSQL user/)
  })
})
