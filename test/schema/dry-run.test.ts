import { readFileSync } from 'node:fs'
import { expect, test } from 'vitest'
import { run as migrate } from '../../src/cli/migrate.js'
import { SCHEMA_VERSION } from '../../src/schema/schema-version.js'
import { capture } from '../support/capture.js'
import { previousConfig } from './support.js'

// The SQL this version installs, as reviewed: any change to it shows here as a diff. After a
// deliberate change (with SCHEMA_VERSION raised when the installed objects change), write it
// again: node dist/cli/main.js migrate --config test/schema/fixtures/previous.yaml --dry-run
//   > test/schema/fixtures/schema-3.dry-run.sql (named by SCHEMA_VERSION).
test('migrate --dry-run prints the reviewed SQL of this schema version', async () => {
  const golden = new URL(`./fixtures/schema-${SCHEMA_VERSION}.dry-run.sql`, import.meta.url)
  const dry = await capture(() => migrate(['--config', previousConfig, '--dry-run']))
  expect(dry).toMatchObject({ code: 0, err: '' })
  expect(dry.out).toBe(readFileSync(golden, 'utf8'))
})
