import { describe, expect, test } from 'vitest'
import { parseConfig } from '../../src/config/load.js'

describe('pool and auth config', () => {
  test('defaults: no pooling, the contract sizes', () => {
    expect(parseConfig({}).pool).toEqual({
      mode: 'none',
      size: 20,
      minIdle: 0,
      idleTimeoutMs: 600000,
      maxLifetimeMs: 3600000,
      waitTimeoutMs: 10000,
    })
  })

  test('pooling needs auth.file or auth.query; auth.query needs auth.user', () => {
    expect(() => parseConfig({ pool: { mode: 'session' } })).toThrow(
      /auth: pool.mode session needs/,
    )
    expect(() =>
      parseConfig({ pool: { mode: 'transaction' }, auth: { query: 'SELECT 1' } }),
    ).toThrow(/auth.user/)
    expect(parseConfig({ pool: { mode: 'transaction' }, auth: { file: 'u.txt' } }).auth.file).toBe(
      'u.txt',
    )
  })

  test('unknown keys and minIdle above size are errors', () => {
    expect(() => parseConfig({ pool: { sizes: 3 } })).toThrow(/unknown key/)
    expect(() => parseConfig({ pool: { size: 2, minIdle: 3 } })).toThrow(/pool.minIdle/)
  })
})
