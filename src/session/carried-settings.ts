import type { ResetWrite, ServerConnection } from '../pool/server-connection.js'
import { keyNaming, sameName, settingsStatement, valueNamed } from '../pool/startup-settings.js'

/**
 * Never carried: pgfence's own statements on the connection before the next client's settings
 * (its table-name check) must run as the pool's user, read UTF-8 and lex standard strings.
 */
const NOT_CARRIED = new Set([
  'session_authorization',
  'client_encoding',
  'standard_conforming_strings',
])

/**
 * Session mode: the startup settings of a client that left are applied again on its server
 * connection in the reset's own write, when the server reports them (application_name,
 * client_encoding, DateStyle...), so that the next client asking for the same values (the
 * common case: one application's connections) finds them in force and its login waits for no
 * settings statement. The values they replaced are remembered, and a next client that asks for
 * other values, or none, gets those values or the connection's own back in its settings
 * statement (settingsToApply). Re-applying cannot fail where the first apply did not, short of the
 * server going away; if it fails, the connection is not reused.
 */
export function resetCarrying(
  server: ServerConnection,
  settings: [string, string][],
  unclean: boolean,
  timeoutMs: number,
  done: (reusable: boolean) => void,
): void {
  const { reported, statement } = carriedStatement(server, settings)
  server.reset(unclean, timeoutMs, statement, (reusable) => {
    if (reusable && statement)
      for (const [name, asked] of reported)
        server.carried.set(name, { asked, own: server.own.get(name)! })
    done(reusable)
  })
}

/** A clean reset's write that leaves `server` carrying `settings` for its next client. */
export function carryingReset(server: ServerConnection, settings: [string, string][]): ResetWrite {
  return server.cleanResetWrite(carriedStatement(server, settings).statement)
}

/** The settings a connection carries for a client, and the statement that applies them. */
interface CarriedStatement {
  settings: [string, string][]
  own: ReadonlyMap<string, string>
  reported: [string, string][]
  statement: string | null
}

/** Each connection's last, made again only for other settings: clients mostly ask the same. */
const carriedStatements = new WeakMap<ServerConnection, CarriedStatement>()

function carriedStatement(
  server: ServerConnection,
  settings: [string, string][],
): CarriedStatement {
  const known = carriedStatements.get(server)
  if (known && known.own === server.own && sameSettings(known.settings, settings)) return known
  const reported = reportedSettings(server.own, settings)
  // Against the values the reset returns to, so that it goes out in the reset's own write.
  const statement = settingsStatement(reported, server.own)
  const made = { settings, own: server.own, reported, statement }
  carriedStatements.set(server, made)
  return made
}

function sameSettings(a: [string, string][], b: [string, string][]): boolean {
  if (a.length !== b.length) return false
  for (let i = 0; i < a.length; i++)
    if (a[i]![0] !== b[i]![0] || a[i]![1] !== b[i]![1]) return false
  return true
}

const NONE: [string, string][] = []

/**
 * Whether the client asks for exactly the settings carried, with the same values: the common
 * case (one application's connections), where nothing is to be applied.
 */
function carriedAsAsked(carried: ServerConnection['carried'], settings: [string, string][]) {
  if (settings.length !== carried.size) return false
  for (const [name, value] of settings) if (valueNamed(carried, name)?.asked !== value) return false
  for (const name of carried.keys())
    if (!settings.some(([asked]) => sameName(asked, name))) return false
  return true
}

/** The settings the server reports and pgfence carries, under the server's names. */
function reportedSettings(
  own: ReadonlyMap<string, string>,
  settings: [string, string][],
): [string, string][] {
  const reported: [string, string][] = []
  for (const [name, asked] of settings) {
    const known = keyNaming(own, name)
    if (known !== undefined && !NOT_CARRIED.has(known.toLowerCase())) reported.push([known, asked])
  }
  return reported
}

/**
 * Whether a session-mode login with `settings` on `server` would send no statement: what
 * settingsToApply gives holds on the server already.
 */
export function carriesAlready(server: ServerConnection, settings: [string, string][]): boolean {
  return settingsStatement(pendingSettings(server, settings), server.parameters) === null
}

/**
 * The settings a session-mode login applies: the connection's own values back in place of those
 * carried from the client before that this client does not ask for, then the client's settings
 * but those carried in force already (compared as asked: the server reports some in a form of
 * its own, DateStyle 'German' as 'German, DMY'). The carried values are forgotten: once these
 * are applied, the connection holds what this client asked for.
 */
export function settingsToApply(
  server: ServerConnection,
  settings: [string, string][],
): [string, string][] {
  const pending = pendingSettings(server, settings)
  if (server.carried.size > 0) server.carried.clear()
  return pending
}

/** What settingsToApply gives, the carried values kept. */
function pendingSettings(
  server: ServerConnection,
  settings: [string, string][],
): [string, string][] {
  if (server.carried.size === 0) return settings
  if (carriedAsAsked(server.carried, settings)) return NONE
  const asked = new Set(settings.map(([name]) => name.toLowerCase()))
  const restores = [...server.carried]
    .filter(([name]) => !asked.has(name.toLowerCase()))
    .map(([name, { own }]): [string, string] => [name, own])
  const missing = settings.filter(
    ([name, value]) => valueNamed(server.carried, name)?.asked !== value,
  )
  return [...restores, ...missing]
}
