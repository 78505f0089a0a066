import pg from 'pg'
import { describe, expect, inject, test } from 'vitest'
import { settingsStatement, startupSettings } from '../../src/pool/startup-settings.js'

describe("the statement that applies a client's startup settings", () => {
  test('quotes and backslashes arrive as written, whatever standard_conforming_strings says', async () => {
    const value = String.raw`it's a\b`
    const settings = startupSettings(new Map([['application_name', value]]))
    const apply = settingsStatement(settings, new Map())!
    const client = new pg.Client({ connectionString: inject('postgresUrl') })
    await client.connect()
    try {
      for (const conforming of ['on', 'off']) {
        await client.query(`SET standard_conforming_strings = ${conforming}`)
        await client.query(apply)
        const { rows } = await client.query("SELECT current_setting('application_name') AS name")
        expect(rows[0].name).toBe(value)
        await client.query('RESET application_name')
      }
    } finally {
      await client.end()
    }
  })

  test('a setting the server already has is left alone', () => {
    const settings = startupSettings(new Map([['DateStyle', 'ISO, MDY']]))
    expect(settingsStatement(settings, new Map([['DateStyle', 'ISO, MDY']]))).toBeNull()
  })
})
