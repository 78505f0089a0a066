import { execFileSync } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { expect, test } from 'vitest'

const repoRoot = fileURLToPath(new URL('../..', import.meta.url))

/** Imports a specifier the way an application would, by package name, and lists its exports. */
function exportsOf(specifier: string): string[] {
  const script = `import(${JSON.stringify(specifier)}).then((m) => console.log(JSON.stringify(Object.keys(m))))`
  return JSON.parse(
    execFileSync(process.execPath, ['-e', script], { cwd: repoRoot, encoding: 'utf8' }),
  )
}

test('the package entry points resolve to the built library', () => {
  expect(exportsOf('pgfence')).toEqual(
    expect.arrayContaining(['startProxy', 'parseConfig', 'loadConfigFile', 'installSql']),
  )
  expect(exportsOf('pgfence/lease')).toEqual(
    expect.arrayContaining(['LeaseManager', 'LeaseUnavailableError', 'LeaseLostError']),
  )
})
