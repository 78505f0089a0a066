import type { ServerConnection } from '../pool/server-connection.js'
import { settingsStatement } from '../pool/startup-settings.js'
import { quoteLiteral } from '../rewrite/sql-text.js'

/**
 * Transaction pooling carries a client's tracked session settings from one server connection to
 * the next: replayed when it takes one, read back from one it gives back after it may have
 * changed them (so PostgreSQL's own rules for SET LOCAL, rollback and RESET apply).
 */

/** A client's startup settings as transaction pooling tracks them: by lower-case name. */
export function settingsByName(settings: [string, string][]): Map<string, string> {
  return new Map(settings.map(([name, value]) => [name.toLowerCase(), value]))
}

/** Whether a connection already has exactly the client's settings (then nothing is replayed). */
export function sameSettings(
  server: ReadonlyMap<string, string>,
  client: ReadonlyMap<string, string>,
): boolean {
  if (server.size !== client.size) return false
  for (const [name, value] of client) if (server.get(name) !== value) return false
  return true
}

/**
 * The statement that brings the connection's settings to the client's (RESET ALL first when it
 * has others), or null; the connection is noted as having them.
 */
export function replayStatement(
  server: ServerConnection,
  settings: Map<string, string>,
): string | null {
  if (sameSettings(server.settings, settings)) return null
  const foreign = [...server.settings].some(([name]) => !settings.has(name))
  const set = settingsStatement([...settings], foreign ? new Map() : server.settings)
  server.settings = new Map(settings)
  if (!foreign) return set
  return set ? `RESET ALL; ${set}` : 'RESET ALL'
}

/**
 * Reads the tracked settings `names` as PostgreSQL left them into `settings`, then RESET ALL
 * for the next client; rejects with the server's error.
 */
export async function readBackSettings(
  server: ServerConnection,
  names: string[],
  settings: Map<string, string>,
): Promise<void> {
  const columns = names.map((name) => `pg_catalog.current_setting(${quoteLiteral(name)}, true)`)
  const [row] = await server.rows(`SELECT ${columns.join(', ')}; RESET ALL`)
  names.forEach((name, i) => {
    const value = row?.[i] ?? ''
    if (value === '') settings.delete(name)
    else settings.set(name, value)
  })
  server.settings = new Map()
}
