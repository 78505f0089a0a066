import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { parse } from 'yaml'
import { expect, test } from 'vitest'
import { parseConfig } from '../../src/config/load.js'
import { readmeBlock, readmeBlocks, repoRoot } from './readme-blocks.js'

/** Languages a reader would paste into a shell, a program or a config file. */
const RUNNABLE = new Set(['sh', 'bash', 'ts', 'js', 'mjs', 'sql', 'yaml'])

function testSources(dir = join(repoRoot, 'test')): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) =>
    entry.isDirectory()
      ? testSources(join(dir, entry.name))
      : entry.name.endsWith('.ts')
        ? [readFileSync(join(dir, entry.name), 'utf8')]
        : [],
  )
}

test('every runnable block of the README is marked as run by a test, or why not', () => {
  const unmarked = readmeBlocks()
    .filter((block) => RUNNABLE.has(block.language) && block.marker === null)
    .map((block) => `README.md:${block.line} (${block.language})`)
  expect(unmarked).toEqual([])
})

test('every block marked readme-test is read by a test of that name', () => {
  const sources = testSources().join('\n')
  const unread = readmeBlocks()
    .filter((block) => block.marker?.kind === 'readme-test')
    .map((block) => block.marker!.value)
    .filter((name) => !sources.includes(`readmeBlock('${name}')`))
  expect(unread).toEqual([])
})

test('the config fragments are valid configs', () => {
  for (const fragment of [
    readmeBlock('config-resources'),
    readmeBlock('config-pool'),
    readmeBlock('config-hosts'),
    readmeBlock('config-patroni'),
  ])
    expect(() => parseConfig(parse(fragment))).not.toThrow()
})

/** Code as prettier may wrap it: no white space, no trailing commas. */
const squeeze = (code: string): string => code.replace(/\s+/g, '').replace(/,([)}\]])/g, '$1')

/** The code of a Markdown table cell: `code` or ``code with `backticks` ``. */
const cellCode = (cell: string): string => cell.trim().replace(/^(`+) ?([\s\S]*?) ?\1$/, '$2')

test("each ORM recipe's per-transaction token call is what its test in test/orm runs", () => {
  const readme = readFileSync(join(repoRoot, 'README.md'), 'utf8')
  const rows = readme
    .split('\n')
    .filter((line) => /^\| (knex|Sequelize|TypeORM|Drizzle|Kysely) /.test(line))
    .map((line) => line.split('|').slice(1, -1))
  expect(rows).toHaveLength(5)
  for (const [orm, , perTransaction] of rows) {
    const file = join(repoRoot, 'test/orm', `${orm!.trim().split(' ')[0]!.toLowerCase()}.test.ts`)
    expect(squeeze(readFileSync(file, 'utf8')), file).toContain(squeeze(cellCode(perTransaction!)))
  }
})
