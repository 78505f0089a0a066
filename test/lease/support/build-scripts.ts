import { randomBytes } from 'node:crypto'
import { mkdirSync, rmSync, writeFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { join } from 'node:path'
import { build } from 'vite'

const repoRoot = fileURLToPath(new URL('../../..', import.meta.url))

/**
 * Compiles TypeScript entry points into runnable ES modules for child processes, as `tsc` would
 * for the published package. The output sits under node_modules so bare imports (ioredis, pg)
 * resolve to the installed packages.
 */
export async function buildScripts(entries: Record<string, string>) {
  const outDir = join(
    repoRoot,
    'node_modules',
    '.cache',
    `pgfence-${randomBytes(4).toString('hex')}`,
  )
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
  return {
    path: (name: string) => join(outDir, `${name}.js`),
    remove: () => rmSync(outDir, { recursive: true, force: true }),
  }
}
