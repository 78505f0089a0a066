import { mkdtempSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { inject } from 'vitest'

/** The password of the superuser in the userlists the pooling tests write. */
export const POOL_PASSWORD = 'pool-secret'

/** A new file in the run's scratch directory (removed when the run ends). */
export const scratchFile = (name: string): string =>
  join(mkdtempSync(join(inject('scratchDir'), 'file-')), name)

/** A PgBouncer userlist in a new directory; by default the superuser with POOL_PASSWORD. */
export function writeUserlist(lines = [`"postgres" "${POOL_PASSWORD}"`]): string {
  const file = scratchFile('userlist.txt')
  writeFileSync(file, `; pgfence test users\n${lines.join('\n')}\n`)
  return file
}
