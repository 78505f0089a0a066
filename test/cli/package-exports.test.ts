import { execFileSync } from 'node:child_process'
import { mkdtempSync, readdirSync, rmSync, symlinkSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
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

test('the installed package ships the SQL of the pgfence schema, and its migrate finds it', () => {
  const dir = mkdtempSync(join(tmpdir(), 'pgfence-pack-'))
  try {
    // The package as npm installs it (dist as built), with the repository's dependencies.
    const [packed] = JSON.parse(
      execFileSync('npm', ['pack', '--ignore-scripts', '--json', '--pack-destination', dir], {
        cwd: repoRoot,
        encoding: 'utf8',
      }),
    ) as { filename: string; files: { path: string }[] }[]
    const sqlFiles = readdirSync(join(repoRoot, 'src/schema/sql')).map((f) => `src/schema/sql/${f}`)
    expect(packed!.files.map((file) => file.path)).toEqual(expect.arrayContaining(sqlFiles))
    execFileSync('tar', ['-xzf', join(dir, packed!.filename), '-C', dir])
    symlinkSync(join(repoRoot, 'node_modules'), join(dir, 'node_modules'))
    const config = join(repoRoot, 'config/pgfence.yaml')
    const sql = execFileSync(
      process.execPath,
      [join(dir, 'package/dist/cli/main.js'), 'migrate', '--config', config, '--dry-run'],
      { encoding: 'utf8' },
    )
    expect(sql).toContain('CREATE OR REPLACE FUNCTION pgfence.inheritance_tree(')
    expect(sql).toMatch(/COMMENT ON SCHEMA pgfence IS 'pgfence schema version \d+';\nCOMMIT;\n$/)
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
})
