import type { TestProject } from 'vitest/node'
import { findPostgres, findRedis } from './services.js'

declare module 'vitest' {
  export interface ProvidedContext {
    /** Superuser URL of the PostgreSQL the tests use (trust or password in the URL). */
    postgresUrl: string
    /** Redis URL, or '' when none could be found or started. */
    redisUrl: string
  }
}

/** Finds PostgreSQL and Redis once for the whole run; stops whatever it started. */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const postgres = await findPostgres()
  const redis = await findRedis()
  project.provide('postgresUrl', postgres.url)
  project.provide('redisUrl', redis?.url ?? '')
  return async () => {
    await redis?.stop()
    await postgres.stop()
  }
}
