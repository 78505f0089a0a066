import { execFile } from 'node:child_process'
import { chownSync, mkdtempSync, rmSync } from 'node:fs'
import net from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'

const run = promisify(execFile)
const binDir = process.env.PGFENCE_TEST_PG_BIN ?? '/usr/lib/postgresql/15/bin'

export async function freePort(): Promise<number> {
  const server = net.createServer()
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as net.AddressInfo
  await new Promise((resolve) => server.close(resolve))
  return port
}

/** Runs a PostgreSQL binary as the OS user postgres when we are root (initdb refuses root). */
function asPostgres(binary: string, args: string[]) {
  const command = join(binDir, binary)
  return process.getuid?.() === 0
    ? run('runuser', ['-u', 'postgres', '--', command, ...args])
    : run(command, args)
}

/**
 * A private PostgreSQL cluster in a temp dir on a free port, so a test can crash it
 * (`pg_ctl -m immediate`) without touching the shared server.
 */
export async function startThrowawayCluster(settings: Record<string, string>) {
  const dir = mkdtempSync(join(tmpdir(), 'pgfence-cluster-'))
  if (process.getuid?.() === 0) {
    const { stdout } = await run('id', ['-u', 'postgres'])
    chownSync(dir, Number(stdout.trim()), Number(stdout.trim()))
  }
  const dataDir = join(dir, 'data')
  const port = await freePort()
  await asPostgres('initdb', ['-D', dataDir, '-U', 'postgres', '-A', 'trust', '--no-sync'])
  const options = [
    `-p ${port}`,
    `-k ${dir}`,
    '-c listen_addresses=127.0.0.1',
    ...Object.entries(settings).map(([name, value]) => `-c ${name}=${value}`),
  ].join(' ')
  const start = () =>
    asPostgres('pg_ctl', ['-D', dataDir, '-o', options, '-l', join(dir, 'log'), '-w', 'start'])
  const stop = (mode: 'fast' | 'immediate') =>
    asPostgres('pg_ctl', ['-D', dataDir, '-m', mode, '-w', 'stop'])
  await start()
  return {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    crash: () => stop('immediate'),
    start,
    remove: async () => {
      await stop('fast').catch(() => {})
      rmSync(dir, { recursive: true, force: true })
    },
  }
}
