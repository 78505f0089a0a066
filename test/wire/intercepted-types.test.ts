import { describe, expect, it } from 'vitest'
import { interceptedTypeChars, interceptedTypeTable } from '../../src/relay/intercepted-types.js'

const sorted = (chars: string) => [...chars].sort().join('')

describe('intercepted message types', () => {
  it('are Terminate alone without statements to read', () => {
    expect(interceptedTypeChars({ statements: false, bind: true })).toBe('X')
  })

  it('add Query and Parse for statements, Bind for maintenance, Close on request', () => {
    expect(sorted(interceptedTypeChars({ statements: true, bind: false }))).toBe('PQX')
    expect(sorted(interceptedTypeChars({ statements: true, bind: true }))).toBe('BPQX')
    const kept = { statements: true, bind: true, close: true }
    expect(sorted(interceptedTypeChars(kept))).toBe('BCPQX')
  })

  it('give the framer a table of the same set, shared between equal sets', () => {
    const table = interceptedTypeTable({ statements: true, bind: false })
    const marked = [...table.keys()].filter((type) => table[type] === 1)
    expect(String.fromCharCode(...marked)).toBe('PQX')
    expect(interceptedTypeTable({ statements: true, bind: false })).toBe(table)
  })
})
