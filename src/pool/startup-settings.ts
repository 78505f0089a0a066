import { quoteLiteral } from '../rewrite/sql-text.js'
import { PgError } from '../wire/error-response.js'

/** Startup parameters that are not settings: they chose the pool or the protocol. */
const NOT_SETTINGS = new Set(['user', 'database', 'options'])

/**
 * The settings a client asked for in its startup packet: plain parameters (application_name,
 * client_encoding, DateStyle...) and `-c name=value` / `--name=value` in `options`.
 */
export function startupSettings(params: Map<string, string>): [string, string][] {
  if (params.has('replication'))
    throw new PgError('08P01', 'replication connections are not supported with pooling')
  const settings: [string, string][] = []
  for (const [name, value] of params) if (!NOT_SETTINGS.has(name)) settings.push([name, value])
  const options = params.get('options')
  return options ? settings.concat(parseOptions(options)) : settings
}

/** libpq's `options`: words split on unescaped whitespace, `\` escaping the next character. */
function parseOptions(options: string): [string, string][] {
  const words = [...options.matchAll(/(?:\\.|\S)+/gs)].map((m) => m[0].replace(/\\(.)/gs, '$1'))
  const settings: [string, string][] = []
  for (let i = 0; i < words.length; i++) {
    let word = words[i]!
    if (word === '-c') word = words[++i] ?? ''
    else if (word.startsWith('-c')) word = word.slice(2)
    else if (word.startsWith('--')) word = word.slice(2)
    else throw new PgError('08P01', `unsupported startup option "${word}" with pooling`)
    const eq = word.indexOf('=')
    if (eq <= 0) throw new PgError('42601', `invalid startup option "${word}"`)
    settings.push([word.slice(0, eq).replaceAll('-', '_'), word.slice(eq + 1)])
  }
  return settings
}

/** Names compared as PostgreSQL compares setting names: ASCII letters in either case. */
export function sameName(a: string, b: string): boolean {
  if (a.length !== b.length) return false
  for (let i = 0; i < a.length; i++) {
    const x = a.charCodeAt(i)
    if (x === b.charCodeAt(i)) continue
    const lower = x | 0x20
    if (lower !== (b.charCodeAt(i) | 0x20) || lower < 0x61 || lower > 0x7a) return false
  }
  return true
}

/** The key of `map` that names the setting `name`, in whatever case each spells it. */
export function keyNaming(map: ReadonlyMap<string, unknown>, name: string): string | undefined {
  if (map.has(name)) return name
  for (const key of map.keys()) if (sameName(key, name)) return key
  return undefined
}

/** A setting's value in `map`, its name matched in any case. */
export function valueNamed<V>(map: ReadonlyMap<string, V>, name: string): V | undefined {
  const key = keyNaming(map, name)
  return key === undefined ? undefined : map.get(key)
}

/**
 * One statement applying the settings that differ from what the server reports (null: none).
 * set_config takes the names as literals, so no name needs quoting.
 */
export function settingsStatement(
  settings: [string, string][],
  current: ReadonlyMap<string, string>,
): string | null {
  const changes = settings.filter(([name, value]) => valueNamed(current, name) !== value)
  if (changes.length === 0) return null
  const calls = changes.map(
    ([name, value]) =>
      `pg_catalog.set_config(${quoteLiteral(name)}, ${quoteLiteral(value)}, false)`,
  )
  return `SELECT ${calls.join(', ')}`
}
