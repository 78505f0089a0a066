import { spawn } from 'node:child_process'
import { existsSync } from 'node:fs'
import { join } from 'node:path'

export interface CommandResult {
  code: number | null
  signal?: NodeJS.Signals
  stdout: string
  stderr: string
}

export interface CommandOptions {
  /** Written to stdin, which is then closed. */
  input?: string
  env?: NodeJS.ProcessEnv
  cwd?: string
  /** Killed after this long, so that a hang fails its test quickly (code null, signal set). */
  timeoutMs?: number
}

const postgresBinDir = process.env.PGFENCE_PG_BIN ?? '/usr/lib/postgresql/15/bin'

/** Path of a PostgreSQL client or server binary: the version-specific one, else the one on PATH. */
export function pgBin(name: string): string {
  const path = join(postgresBinDir, name)
  return existsSync(path) ? path : name
}

/**
 * The environment for programs the tests run (psql, initdb, …): without the sanitizer runtime that
 * .ci/native-checks preloads into Node for the addon, which those programs do not tolerate
 * (PostgreSQL's binaries hang under it).
 */
export function childEnv(): NodeJS.ProcessEnv {
  const env = { ...process.env }
  for (const name of ['LD_PRELOAD', 'ASAN_OPTIONS', 'UBSAN_OPTIONS']) delete env[name]
  return env
}

/** Runs a program to completion and collects its output; a non-zero exit is a result, not a throw. */
export function runCommand(
  command: string,
  args: readonly string[],
  options: CommandOptions = {},
): Promise<CommandResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, {
      cwd: options.cwd,
      env: { ...childEnv(), ...options.env },
      stdio: 'pipe',
    })
    let stdout = ''
    let stderr = ''
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk))
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk))
    const timer = setTimeout(() => child.kill('SIGKILL'), options.timeoutMs ?? 30_000)
    child.once('error', reject)
    child.once('close', (code, signal) => {
      clearTimeout(timer)
      resolve(signal ? { code, signal, stdout, stderr } : { code, stdout, stderr })
    })
    // A program may exit without reading its input; that is its answer, not a test failure.
    child.stdin.on('error', () => {})
    child.stdin.end(options.input ?? '')
  })
}
