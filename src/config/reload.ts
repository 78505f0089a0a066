import { parseConfig } from './load.js'
import type { Config } from './schema.js'

/** The dotted name of every config key that holds a value (a list is one value). */
type KeyOf<T, Prefix extends string> = T extends readonly unknown[]
  ? Prefix
  : T extends object
    ? { [K in keyof T & string]-?: KeyOf<NonNullable<T[K]>, `${Prefix}.${K}`> }[keyof T & string]
    : Prefix
export type ConfigKey = {
  [K in keyof Config & string]-?: KeyOf<NonNullable<Config[K]>, K>
}[keyof Config & string]

/**
 * What a reload does with each key: `applied` puts the file's value in force (for new sessions
 * and connections, and the sessions open from their next statement); `restart` keeps the running
 * value, logged, until pgfence restarts. The type makes a key missing here a compile error.
 */
export const RELOAD_EFFECT: Readonly<Record<ConfigKey, 'applied' | 'restart'>> = {
  // Bound at start.
  'listen.host': 'restart',
  'listen.port': 'restart',
  'listen.unixSocketDir': 'restart',
  // Server connections open, pooled ones and their cancel keys all point at one upstream.
  'upstream.host': 'restart',
  'upstream.port': 'restart',
  'upstream.tls': 'restart',
  'upstream.ca': 'restart',
  'upstream.connectTimeoutMs': 'restart',
  'upstream.hosts': 'restart',
  'upstream.targetSessionAttrs': 'restart',
  'upstream.primaryCheckIntervalMs': 'restart',
  'upstream.patroni': 'restart',
  'tls.cert': 'restart',
  'tls.key': 'restart',
  'limits.maxClientConnections': 'applied',
  'limits.maxMessageBytes': 'applied',
  'limits.startupTimeoutMs': 'applied',
  'limits.shutdownTimeoutMs': 'applied',
  'limits.queryTimeoutMs': 'applied',
  'limits.idleTransactionTimeoutMs': 'applied',
  // New client sockets and server connections.
  'tcpKeepalive.enabled': 'applied',
  'tcpKeepalive.idleMs': 'applied',
  'tcpKeepalive.intervalMs': 'applied',
  'tcpKeepalive.count': 'applied',
  'log.level': 'applied',
  'fencing.setting': 'applied',
  'fencing.commentKey': 'applied',
  'fencing.resourceSetting': 'applied',
  'fencing.resourceCommentKey': 'applied',
  'fencing.rejectUnissuedTokens': 'applied',
  'fencing.tables': 'applied',
  'fencing.resources': 'applied',
  // Sessions are made by the relay chosen at start.
  relay: 'restart',
  // Pools resize in place; whether there are pools, and of which kind, is fixed at start.
  'pool.mode': 'restart',
  'pool.size': 'applied',
  'pool.minIdle': 'applied',
  'pool.idleTimeoutMs': 'applied',
  'pool.maxLifetimeMs': 'applied',
  'pool.waitTimeoutMs': 'applied',
  // The user list is read again; logins from then on use it.
  'auth.file': 'applied',
  'auth.query': 'applied',
  'auth.user': 'applied',
  'admin.listen.host': 'restart',
  'admin.listen.port': 'restart',
  'admin.users': 'applied',
}

const keysWith = (effect: 'applied' | 'restart') =>
  (Object.keys(RELOAD_EFFECT) as ConfigKey[]).filter((key) => RELOAD_EFFECT[key] === effect)

/** Keys a reload puts in force, and keys that keep their running value until a restart. */
export const APPLIED_KEYS = keysWith('applied')
export const RESTART_KEYS = keysWith('restart')

type Tree = Record<string, unknown>

function valueAt(config: Config, key: string): unknown {
  return key
    .split('.')
    .reduce<unknown>((value, part) => (value as Tree | undefined)?.[part], config)
}

const same = (a: unknown, b: unknown) => JSON.stringify(a) === JSON.stringify(b)

/** A restart-only key the file changed: the value that stays in force and the file's. */
export interface KeptKey {
  key: ConfigKey
  running: unknown
  file: unknown
}

/** The restart-only keys whose value differs between the running config and the file's. */
export function keysNeedingRestart(running: Config, loaded: Config): KeptKey[] {
  return RESTART_KEYS.filter((key) => !same(valueAt(running, key), valueAt(loaded, key))).map(
    (key) => ({ key, running: valueAt(running, key), file: valueAt(loaded, key) }),
  )
}

/** Sets `key` in a plain copy of a config; undefined removes it, and objects it leaves empty. */
function setAt(tree: Tree, [part, ...rest]: string[], value: unknown): void {
  if (rest.length === 0) {
    if (value === undefined) delete tree[part!]
    else tree[part!] = value
    return
  }
  const inner = (tree[part!] ??= {}) as Tree
  setAt(inner, rest, value)
  if (Object.keys(inner).length === 0) delete tree[part!]
}

/**
 * What a reload puts in force: the file's config with the running value of each restart-only
 * key. Validated again, since a kept key may not go with the file's others (pool.mode kept, its
 * auth removed): a ConfigError then, and the reload is refused.
 */
export function reloadableConfig(running: Config, loaded: Config): Config {
  const next = structuredClone(loaded) as unknown as Tree
  for (const { key, running: value } of keysNeedingRestart(running, loaded))
    setAt(next, key.split('.'), structuredClone(value))
  // With hosts, host and port are the first host's, as parsed: the file gives one or the other.
  const upstream = next.upstream as Tree
  if (upstream.hosts !== undefined) {
    delete upstream.host
    delete upstream.port
  }
  return parseConfig(next, 'config with the running values of the restart-only keys')
}
