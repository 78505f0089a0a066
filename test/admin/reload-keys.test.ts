import { describe, expect, test } from 'vitest'
import { parseConfig } from '../../src/config/load.js'
import {
  keysNeedingRestart,
  RELOAD_EFFECT,
  reloadableConfig,
  type ConfigKey,
} from '../../src/config/reload.js'
import { schemaKeys } from '../support/schema-keys.js'
import { configSchema } from '../../src/config/schema.js'

/** The dotted names of the schema's keys that hold a value (a list is one), read from it. */
/** A config with every key set, optional sections included. */
const base = {
  listen: { host: '127.0.0.1', port: 6432, unixSocketDir: '/tmp' },
  upstream: { ca: 'ca.pem' },
  tls: { cert: 'server.crt', key: 'server.key' },
  pool: { mode: 'session', size: 3 },
  auth: { file: 'userlist.txt', query: 'SELECT usename, passwd FROM pg_shadow', user: 'auth' },
  admin: { listen: { port: 9930 }, users: ['postgres'] },
  fencing: { tables: [{ name: 'invoices' }], resources: [{ tables: ['jobs'], resource: 'a' }] },
}

/** For each key, a valid value other than `base`'s: a key missing here fails the test below. */
const changed: Record<ConfigKey, unknown> = {
  'listen.host': '127.0.0.2',
  'listen.port': 6433,
  'listen.unixSocketDir': '/var/run',
  'upstream.host': '127.0.0.3',
  'upstream.port': 5433,
  'upstream.tls': 'require',
  'upstream.ca': 'other-ca.pem',
  'upstream.connectTimeoutMs': 1234,
  'upstream.hosts': ['127.0.0.1:5432', '127.0.0.2:5432'],
  'upstream.targetSessionAttrs': 'any',
  'upstream.primaryCheckIntervalMs': 250,
  'upstream.patroni': ['http://127.0.0.1:8008', 'http://127.0.0.2:8008'],
  'tls.cert': 'other.crt',
  'tls.key': 'other.key',
  'limits.maxClientConnections': 5,
  'limits.maxMessageBytes': 4096,
  'limits.startupTimeoutMs': 1000,
  'limits.shutdownTimeoutMs': 1000,
  'limits.queryTimeoutMs': 1000,
  'limits.idleTransactionTimeoutMs': 1000,
  'tcpKeepalive.enabled': false,
  'tcpKeepalive.idleMs': 60000,
  'tcpKeepalive.intervalMs': 2000,
  'tcpKeepalive.count': 9,
  'log.level': 'warn',
  'fencing.setting': 'app.other_token',
  'fencing.commentKey': 'other_token',
  'fencing.resourceSetting': 'app.other_resource',
  'fencing.resourceCommentKey': 'other_resource',
  'fencing.rejectUnissuedTokens': true,
  'fencing.tables': [{ name: 'payments', column: 'fencing_token', requireToken: false }],
  'fencing.resources': [{ tables: ['jobs'], resourceFrom: 'session' }],
  relay: 'node',
  'pool.mode': 'transaction',
  'pool.size': 1,
  'pool.minIdle': 1,
  'pool.idleTimeoutMs': 1000,
  'pool.maxLifetimeMs': 1000,
  'pool.waitTimeoutMs': 1000,
  'auth.file': 'other-userlist.txt',
  'auth.query': 'SELECT 1, 2',
  'auth.user': 'other',
  'admin.listen.host': '127.0.0.4',
  'admin.listen.port': 9931,
  'admin.users': ['someone'],
}

function withValue(raw: object, key: string, value: unknown): object {
  const copy = structuredClone(raw) as Record<string, unknown>
  const parts = key.split('.')
  let tree = copy
  for (const part of parts.slice(0, -1)) tree = (tree[part] ??= {}) as Record<string, unknown>
  tree[parts.at(-1)!] = value
  return copy
}

const valueAt = (config: object, key: string): unknown =>
  key.split('.').reduce<unknown>((v, part) => (v as Record<string, unknown>)?.[part], config)

describe('every config key is either applied by a reload or kept until a restart', () => {
  test('the keys classified are exactly the schema keys', () => {
    const keys = schemaKeys(configSchema, false)
    expect(keys.length).toBeGreaterThan(30)
    expect(Object.keys(RELOAD_EFFECT).sort()).toEqual([...keys].sort())
    expect(Object.keys(changed).sort()).toEqual([...keys].sort())
  })

  const running = parseConfig(base)
  /** Patroni endpoints go with hosts, one for each: both run with the same hosts. */
  const onHosts = withValue(base, 'upstream.hosts', changed['upstream.hosts'])
  test.each(Object.entries(RELOAD_EFFECT))('%s: %s', (key, effect) => {
    const from = key === 'upstream.patroni' ? onHosts : base
    const running = parseConfig(from)
    const loaded = parseConfig(withValue(from, key, changed[key as ConfigKey]))
    expect(valueAt(loaded, key)).not.toEqual(valueAt(running, key))
    const next = reloadableConfig(running, loaded)
    const kept = keysNeedingRestart(running, loaded)
    if (effect === 'applied') {
      expect(valueAt(next, key)).toEqual(valueAt(loaded, key))
      expect(kept).toEqual([])
    } else {
      expect(valueAt(next, key)).toEqual(valueAt(running, key))
      expect(kept).toEqual([{ key, running: valueAt(running, key), file: valueAt(loaded, key) }])
    }
    // Nothing else moves.
    for (const other of Object.keys(RELOAD_EFFECT).filter((k) => k !== key))
      expect(valueAt(next, other)).toEqual(valueAt(running, other))
  })

  test('an optional section added or removed by the file is kept as it runs', () => {
    const bare = parseConfig({ ...base, tls: undefined, admin: { users: ['postgres'] } })
    const next = reloadableConfig(bare, running)
    expect(next.tls).toBeUndefined()
    expect(next.admin).toEqual({ users: ['postgres'] })
    const back = reloadableConfig(running, bare)
    expect(back.tls).toEqual(running.tls)
    expect(back.admin).toEqual(running.admin)
  })

  test('a kept key that no longer goes with the file refuses the reload', () => {
    const loaded = parseConfig({ ...base, pool: { mode: 'none' }, auth: {} })
    expect(() => reloadableConfig(running, loaded)).toThrow(/pool.mode session needs auth/)
  })
})
