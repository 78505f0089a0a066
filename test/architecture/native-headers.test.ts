import { execFileSync } from 'node:child_process'
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'

const ROOT = path.resolve(import.meta.dirname, '../..')
const fresh = mkdtempSync(path.join(tmpdir(), 'pgfence-native-headers-'))
execFileSync(process.execPath, [path.join(ROOT, 'scripts/native-headers.mjs'), fresh])
const headers = readdirSync(fresh)

/**
 * The native relay's headers that state what the TypeScript sources define (protocol codes, the
 * progress one relay hands the other) are committed, so that the addon builds at install
 * without TypeScript: they must be what the generator writes from the sources now.
 */
describe('the generated headers of the native relay', () => {
  afterAll(() => rmSync(fresh, { recursive: true }))

  it('are written by the generator', () => {
    expect(headers).toEqual(
      expect.arrayContaining([
        'protocol-codes.h',
        'login-codes.h',
        'link-events.h',
        'carried-progress.h',
      ]),
    )
  })

  it.each(headers)(
    'src/native/%s is as scripts/native-headers.mjs writes it (run it after changing its sources)',
    (header) => {
      const committed = readFileSync(path.join(ROOT, 'src/native', header), 'utf8')
      expect(committed).toBe(readFileSync(path.join(fresh, header), 'utf8'))
    },
  )
})
