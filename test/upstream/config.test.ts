import { describe, expect, test } from 'vitest'
import { parseConfig } from '../../src/config/load.js'
import { followUpstream } from '../../src/upstream/primary-tracker.js'

describe('upstream config', () => {
  test('one host/port by default, never probed: one node, always the primary', () => {
    const config = parseConfig({ upstream: { host: 'db.internal' } }).upstream
    expect(config).toMatchObject({ host: 'db.internal', port: 5432 })
    expect(config.hosts).toBeUndefined()
    const upstream = followUpstream(config)
    expect(upstream.following).toBe(false)
    expect(upstream.current()?.name).toBe('db.internal:5432')
  })

  test('hosts: libpq order, default port 5432, IPv6 in brackets, read-write every 1000 ms', () => {
    const config = parseConfig({
      upstream: { hosts: ['10.0.0.1:6543', '[::1]:5433', 'db2'] },
    }).upstream
    expect(config).toMatchObject({
      targetSessionAttrs: 'read-write',
      primaryCheckIntervalMs: 1000,
      host: '10.0.0.1',
      port: 6543,
    })
    const upstream = followUpstream({ ...config, primaryCheckIntervalMs: 60_000 })
    try {
      expect(upstream.nodes.map((node) => node.name)).toEqual([
        '10.0.0.1:6543',
        '[::1]:5433',
        'db2:5432',
      ])
      expect(upstream.nodes.map((node) => node.config.port)).toEqual([6543, 5433, 5432])
      expect(upstream.current()).toBeNull()
    } finally {
      upstream.close()
    }
  })

  test('host/port and hosts are exclusive; patroni pairs with hosts one to one', () => {
    expect(() => parseConfig({ upstream: { hosts: ['a:1'], port: 5432 } })).toThrow(
      /upstream.hosts: give either host\/port or hosts/,
    )
    expect(() => parseConfig({ upstream: { hosts: ['a:70000'] } })).toThrow(/port out of range/)
    expect(() => parseConfig({ upstream: { hosts: ['a b'] } })).toThrow(/must be host:port/)
    expect(() =>
      parseConfig({ upstream: { hosts: ['a', 'b'], patroni: ['http://a:8008'] } }),
    ).toThrow(/upstream.patroni: needs hosts, one Patroni endpoint for each host/)
    expect(() =>
      parseConfig({ upstream: { hosts: ['a'], targetSessionAttrs: 'standby' as never } }),
    ).toThrow(/targetSessionAttrs/)
  })
})
