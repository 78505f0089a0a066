import { execFile } from 'node:child_process'
import { promisify } from 'node:util'
import { expect, inject, test } from 'vitest'

const run = promisify(execFile)

test.each(['start', 'dev', 'migrate', 'uninstall', 'explain', 'demo'])(
  'pgfence %s --help prints its usage and exits 0',
  async (command) => {
    const { stdout, stderr } = await run(process.execPath, [inject('cliPath'), command, '--help'])
    expect(stdout).toMatch(new RegExp(`^usage: pgfence ${command} `))
    expect(stderr).toBe('')
  },
)
