import type { Config } from './schema.js'

/** Keys read only at start: a reload that changes them is logged, and they keep their value. */
const RESTART_KEYS = ['listen', 'upstream', 'tls', 'relay', 'admin.listen'] as const

function valueAt(config: Config, key: string): unknown {
  return key
    .split('.')
    .reduce<unknown>(
      (value, part) => (value as Record<string, unknown> | undefined)?.[part],
      config,
    )
}

/** The keys of RESTART_KEYS whose value differs between the two configs. */
export function keysNeedingRestart(running: Config, loaded: Config): string[] {
  return RESTART_KEYS.filter(
    (key) => JSON.stringify(valueAt(running, key)) !== JSON.stringify(valueAt(loaded, key)),
  )
}

/** The loaded config with the restart-only keys of the running one: what a reload puts in force. */
export function reloadableConfig(running: Config, loaded: Config): Config {
  const admin = loaded.admin ?? (running.admin?.listen ? { users: [] } : undefined)
  return {
    ...loaded,
    listen: running.listen,
    upstream: running.upstream,
    tls: running.tls,
    relay: running.relay,
    admin: admin && { ...admin, listen: running.admin?.listen },
  }
}
