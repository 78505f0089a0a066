import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, expect, test, vi } from 'vitest'
import { run as explain } from '../../src/cli/explain.js'
import { parseConfig } from '../../src/config/load.js'

const dir = mkdtempSync(join(tmpdir(), 'pgfence-resource-config-'))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

test('the resource keys have defaults', () => {
  const { fencing } = parseConfig({})
  expect(fencing).toMatchObject({
    resourceSetting: 'app.fencing_resource',
    resourceCommentKey: 'fencing_resource',
    rejectUnissuedTokens: false,
    resources: [],
  })
})

test('a table in two rules is a config error naming the table', () => {
  expect(() =>
    parseConfig({
      fencing: {
        tables: [{ name: 'payouts' }],
        resources: [{ tables: ['public.payouts'], resource: 'billing' }],
      },
    }),
  ).toThrow(/fencing\.resources\.0\.tables\.0: table public\.payouts is in two fencing rules/)
  expect(() =>
    parseConfig({
      fencing: {
        resources: [
          { tables: ['jobs'], resource: 'a' },
          { tables: ['"jobs"'], resourceFrom: 'session' },
        ],
      },
    }),
  ).toThrow(/table "jobs" is in two fencing rules/)
  expect(() =>
    parseConfig({
      fencing: {
        resources: [
          { tables: ['a.jobs'], resource: 'a' },
          { tables: ['b.jobs'], resource: 'b' },
        ],
      },
    }),
  ).not.toThrow()
})

test('a resource rule names its resource exactly one way', () => {
  for (const rule of [
    { tables: ['jobs'] },
    { tables: ['jobs'], resource: 'a', resourceFrom: 'session' },
    { tables: ['jobs'], resourceFrom: 'tenant' },
    { tables: [], resource: 'a' },
  ]) {
    expect(() => parseConfig({ fencing: { resources: [rule] } })).toThrow(/fencing\.resources\.0/)
  }
})

test('explain shows the rewrite of a member-table write', async () => {
  const config = join(dir, 'pgfence.yaml')
  writeFileSync(
    config,
    'fencing:\n  resources:\n    - tables: [payouts]\n      resource: nightly-billing\n',
  )
  const out: string[] = []
  const write = vi
    .spyOn(process.stdout, 'write')
    .mockImplementation((chunk: string | Uint8Array) => out.push(String(chunk)) > 0)
  try {
    const sql = 'UPDATE payouts SET amount = 1 WHERE id = 2'
    expect(await explain(['--config', config, '--token', '3', sql])).toBe(0)
  } finally {
    write.mockRestore()
  }
  expect(out.join('')).toBe(
    "upstream: UPDATE payouts SET amount = 1 WHERE (SELECT pgfence.enter_resource('nightly-billing', " +
      "pgfence.token(NULL, 'app.fencing_token', true, '\"payouts\"', NULL), '\"payouts\"')) AND id = 2\n" +
      'fenced: "payouts", with token 3 (session); PF409 if a row or resource holds a higher one\n',
  )
})
