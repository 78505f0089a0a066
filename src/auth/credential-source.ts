import pg from 'pg'
import type { AuthConfig, Config } from '../config/schema.js'
import { pgSsl } from '../upstream/node-probe.js'
import type { Upstream } from '../upstream/primary-tracker.js'
import { parseSecret, type Secret } from './secret.js'
import { readUserlist } from './userlist.js'

/** Where pgfence finds a user's secret: auth.file, else auth.query run as auth.user. */
export interface CredentialSource {
  lookup(user: string, database: string): Promise<Secret | null>
  /** The user's secret in auth.file, without waiting: null when the file has none. */
  fromFile(user: string): Secret | null
}

export function createCredentialSource(auth: AuthConfig, upstream: Upstream) {
  const users = auth.file ? readUserlist(auth.file) : new Map<string, string>()
  // Parsed once here, not at every login.
  const secrets = new Map([...users].map(([user, text]) => [user, parseSecret(text)]))
  const fromFile = (user: string) => secrets.get(user) ?? null
  if (!auth.query) return { lookup: async (user: string) => fromFile(user), fromFile }
  const query = auth.query
  const authUser = auth.user!
  return {
    lookup: async (user: string, database: string) =>
      fromFile(user) ??
      lookupByQuery(query, user, database, authUser, users.get(authUser), primaryConfig(upstream)),
    fromFile,
  } satisfies CredentialSource
}

/** The primary's config, or the first node's while none is known (the lookup then fails in time). */
const primaryConfig = (upstream: Upstream) => (upstream.current() ?? upstream.nodes[0]!).config

/** One short connection per lookup, as auth.user, to the database the client asked for. */
async function lookupByQuery(
  text: string,
  user: string,
  database: string,
  authUser: string,
  password: string | undefined,
  upstream: Config['upstream'],
): Promise<Secret | null> {
  const client = new pg.Client({
    host: upstream.host,
    port: upstream.port,
    user: authUser,
    password,
    database,
    connectionTimeoutMillis: upstream.connectTimeoutMs,
    ssl: pgSsl(upstream),
  })
  await client.connect()
  try {
    const { rows } = await client.query<unknown[]>({ text, values: [user], rowMode: 'array' })
    const secret = rows[0]?.[1]
    return typeof secret === 'string' && secret !== '' ? parseSecret(secret) : null
  } finally {
    await client.end()
  }
}
