import { randomBytes } from 'node:crypto'
import { mkdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { join } from 'node:path'
import { build } from 'vite'

const repoRoot = fileURLToPath(new URL('../../..', import.meta.url))

/**
 * Compiles TypeScript entry points into runnable ES modules for child processes, as `tsc` would
 * for the published package. The output sits under node_modules so bare imports (ioredis, pg)
 * resolve to the installed packages, and two levels under a link to `src`, as `dist/schema`
 * is in the package, so that the schema's SQL files are found (src/schema/sql-file.ts).
 */
export async function buildScripts(entries: Record<string, string>) {
  const root = join(repoRoot, 'node_modules', '.cache', `pgfence-${randomBytes(4).toString('hex')}`)
  const outDir = join(root, 'dist', 'scripts')
  await build({
    configFile: false,
    logLevel: 'silent',
    root: repoRoot,
    build: {
      ssr: true,
      outDir,
      minify: false,
      emptyOutDir: true,
      rollupOptions: {
        input: Object.fromEntries(
          Object.entries(entries).map(([name, path]) => [name, join(repoRoot, path)]),
        ),
        output: { format: 'esm', entryFileNames: '[name].js' },
      },
    },
  })
  mkdirSync(outDir, { recursive: true })
  writeFileSync(join(outDir, 'package.json'), '{ "type": "module" }\n')
  symlinkSync(join(repoRoot, 'src'), join(root, 'src'))
  return {
    path: (name: string) => join(outDir, `${name}.js`),
    // Removes the link, never what it points to.
    remove: () => rmSync(root, { recursive: true, force: true }),
  }
}
