import { execFileSync } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import type { TestProject } from 'vitest/node'
import { findEtcd, findPostgres, findRedis } from './services.js'

const repoRoot = fileURLToPath(new URL('../..', import.meta.url))

declare module 'vitest' {
  export interface ProvidedContext {
    /** Superuser URL of the PostgreSQL the tests use (trust or password in the URL). */
    postgresUrl: string
    /** Redis URL, or '' when none could be found or started. */
    redisUrl: string
    /** etcd client URL, or '' when none was given and no `etcd` binary is installed. */
    etcdUrl: string
    /** The built CLI (`dist/cli/main.js`), compiled from the current sources for this run. */
    cliPath: string
    /** A directory for the run's files (userlists...), removed when the run ends. */
    scratchDir: string
  }
}

/** Finds PostgreSQL, Redis and etcd once for the whole run; stops whatever it started. */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  // Tests that spawn `pgfence` run what the sources say now, not an older build.
  execFileSync(
    process.execPath,
    [`${repoRoot}node_modules/typescript/bin/tsc`, '-p', 'tsconfig.json'],
    {
      cwd: repoRoot,
      stdio: 'inherit',
    },
  )
  project.provide('cliPath', `${repoRoot}dist/cli/main.js`)
  const postgres = await findPostgres()
  const redis = await findRedis()
  const etcd = await findEtcd()
  project.provide('postgresUrl', postgres.url)
  project.provide('redisUrl', redis?.url ?? '')
  project.provide('etcdUrl', etcd?.url ?? '')
  const scratchDir = mkdtempSync(join(tmpdir(), 'pgfence-test-'))
  project.provide('scratchDir', scratchDir)
  return async () => {
    rmSync(scratchDir, { recursive: true, force: true })
    await etcd?.stop()
    await redis?.stop()
    await postgres.stop()
  }
}
