import { isMd5Secret } from './md5.js'
import { parseVerifier, type ScramVerifier } from './scram.js'

/** What pgfence knows of a user's password: a SCRAM verifier, an md5 hash, or the password. */
export type Secret =
  | { kind: 'scram'; verifier: ScramVerifier }
  | { kind: 'md5'; hash: string }
  | { kind: 'plain'; password: string }

/** Reads a password column as PostgreSQL (pg_authid.rolpassword) and PgBouncer store it. */
export function parseSecret(text: string): Secret {
  const verifier = parseVerifier(text)
  if (verifier) return { kind: 'scram', verifier }
  if (isMd5Secret(text)) return { kind: 'md5', hash: text }
  return { kind: 'plain', password: text }
}
