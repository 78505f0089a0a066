#!/usr/bin/env node
// First: V8's young generation is held at its initial size before any module allocates.
import './young-generation.js'
import { ConfigError } from '../config/load.js'

/** A subcommand's module: `usage` is what `pgfence <command> --help` prints. */
type Command = { run(argv: string[]): Promise<number>; usage: string }

const commands: Record<string, { about: string; load: () => Promise<Command> }> = {
  start: { about: 'run the proxy (--config FILE)', load: () => import('./start.js') },
  dev: {
    about: 'embedded PostgreSQL, demo database and proxy on 127.0.0.1:6432 (npm start)',
    load: () => import('./dev.js'),
  },
  migrate: {
    about:
      'install or upgrade the pgfence schema and fence columns (--config FILE --database-url URL [--dry-run | --check])',
    load: () => import('./migrate.js'),
  },
  uninstall: {
    about:
      'remove the pgfence schema and triggers (--config FILE --database-url URL [--drop-fence-columns])',
    load: () => import('./uninstall.js'),
  },
  explain: {
    about: 'show what pgfence sends upstream for a statement (--config FILE "SQL")',
    load: () => import('./explain.js'),
  },
  demo: {
    about: 'the GC-pause story and a Redis failover with real processes (--html FILE)',
    load: () => import('./demo.js'),
  },
}

function usage(): string {
  const lines = Object.entries(commands).map(([name, { about }]) => `  ${name.padEnd(11)}${about}`)
  return `usage: pgfence <command> [options]\n\ncommands:\n${lines.join('\n')}\n`
}

async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv
  const command = name === undefined ? undefined : commands[name]
  if (!command) {
    process.stderr.write(usage())
    return name === undefined || name === 'help' || name === '--help' ? 0 : 2
  }
  const module = await command.load()
  if (rest.includes('--help') || rest.includes('-h')) {
    process.stdout.write(`${module.usage}\n`)
    return 0
  }
  try {
    return await module.run(rest)
  } catch (err) {
    if (
      err instanceof ConfigError ||
      (err as { code?: string }).code?.startsWith('ERR_PARSE_ARGS')
    ) {
      process.stderr.write(`pgfence ${name}: ${(err as Error).message}\n`)
      return 2
    }
    throw err
  }
}

process.exitCode = await main(process.argv.slice(2))
