import { readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { expect, test } from 'vitest'
import { configSchema } from '../../src/config/schema.js'
import { schemaKeys } from '../support/schema-keys.js'

// The README's configuration tables must name every key of the schema, and no other: the zod
// schema is the source, so a key added there without its line fails here.

/**
 * The keys in the first column of the tables of the README's "Configuration" section. A key
 * written `.port` after `admin.listen.host` is `admin.listen.port`.
 */
function readmeKeys(): string[] {
  const readme = readFileSync(fileURLToPath(new URL('../../README.md', import.meta.url)), 'utf8')
  const section = readme.split(/^## /m).find((part) => part.startsWith('Configuration\n'))
  expect(section).toBeDefined()
  const keys: string[] = []
  for (const line of section!.split('\n')) {
    const cell = /^\| (`[^|]*`) *\|/.exec(line)?.[1]
    if (cell === undefined) continue
    let previous = ''
    for (const [, name] of cell.matchAll(/`([^`]+)`/g)) {
      const key = name!.startsWith('.') ? previous.replace(/\.[^.]+$/, name!) : name!
      keys.push(key)
      previous = key
    }
  }
  return keys
}

test('the README configuration tables list exactly the keys of the config schema', () => {
  const documented = readmeKeys()
  expect(new Set(documented).size).toBe(documented.length)
  expect(documented.sort()).toEqual(schemaKeys(configSchema, true).sort())
})
