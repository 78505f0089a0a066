import { readFileSync } from 'node:fs'

/**
 * PgBouncer's userlist.txt: one `"user" "password-or-secret"` per line, `""` for a quote inside
 * a field; blank lines and lines starting with `;` or `#` are ignored, as is anything after the
 * second field.
 */
export function parseUserlist(text: string): Map<string, string> {
  const users = new Map<string, string>()
  text.split(/\r?\n/).forEach((line, index) => {
    const trimmed = line.trim()
    if (trimmed === '' || trimmed.startsWith(';') || trimmed.startsWith('#')) return
    const fields = [...trimmed.matchAll(/"((?:[^"]|"")*)"/g)].map((m) =>
      m[1]!.replaceAll('""', '"'),
    )
    if (fields.length < 2) throw new Error(`userlist line ${index + 1}: expected "user" "password"`)
    users.set(fields[0]!, fields[1]!)
  })
  return users
}

export function readUserlist(path: string): Map<string, string> {
  try {
    return parseUserlist(readFileSync(path, 'utf8'))
  } catch (err) {
    throw new Error(`cannot read auth.file ${path}: ${(err as Error).message}`)
  }
}
