import { mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

/** The password of the superuser in the userlists the pooling tests write. */
export const POOL_PASSWORD = 'pool-secret'

/** A PgBouncer userlist in a new directory; by default the superuser with POOL_PASSWORD. */
export function writeUserlist(lines = [`"postgres" "${POOL_PASSWORD}"`]): string {
  const file = join(mkdtempSync(join(tmpdir(), 'pgfence-userlist-')), 'userlist.txt')
  writeFileSync(file, `; pgfence test users\n${lines.join('\n')}\n`)
  return file
}
