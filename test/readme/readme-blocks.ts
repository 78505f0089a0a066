import { spawn, type ChildProcess } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'

export const repoRoot = fileURLToPath(new URL('../..', import.meta.url))

/** A fenced code block of the README, with the marker comment that stands above it. */
export interface ReadmeBlock {
  language: string
  text: string
  /** 1-based line of the opening fence. */
  line: number
  /** `readme-test: NAME` (run by a test) or `not run: REASON`; null when unmarked. */
  marker: { kind: 'readme-test' | 'not run'; value: string } | null
}

const MARKER = /^<!-- (readme-test|not run): (.+?) -->$/

/** Every fenced code block of README.md, in order. */
export function readmeBlocks(): ReadmeBlock[] {
  const lines = readFileSync(`${repoRoot}README.md`, 'utf8').split('\n')
  const blocks: ReadmeBlock[] = []
  for (let i = 0; i < lines.length; i++) {
    const open = /^```(\S*)$/.exec(lines[i]!)
    if (!open) continue
    const end = lines.indexOf('```', i + 1)
    let above = i - 1
    while (above >= 0 && lines[above]!.trim() === '') above--
    const marked = above >= 0 ? MARKER.exec(lines[above]!) : null
    blocks.push({
      language: open[1]!,
      text: lines.slice(i + 1, end).join('\n') + '\n',
      line: i + 1,
      marker: marked ? { kind: marked[1] as 'readme-test' | 'not run', value: marked[2]! } : null,
    })
    i = end
  }
  return blocks
}

/** The text of the block marked `readme-test: NAME`, exactly as the README shows it. */
export function readmeBlock(name: string): string {
  const found = readmeBlocks().filter((block) => block.marker?.value === name)
  if (found.length !== 1)
    throw new Error(`README: ${found.length} blocks marked readme-test: ${name}`)
  return found[0]!.text
}

/** The commands of a shell block: one per line, blank and comment-only lines left out. */
export const shellCommands = (block: string): string[] =>
  block.split('\n').filter((line) => line.trim() !== '' && !line.trimStart().startsWith('#'))

export interface ShellResult {
  code: number | null
  stdout: string
  stderr: string
}

/** Runs one command as a user would type it in bash, from the repository's root. */
export function runShell(command: string, env: NodeJS.ProcessEnv = {}): Promise<ShellResult> {
  return new Promise((resolve, reject) => {
    const child = spawn('bash', ['-c', command], {
      cwd: repoRoot,
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk))
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk))
    child.once('error', reject)
    child.once('close', (code) => resolve({ code, stdout, stderr }))
  })
}

/** A long-running command (a server) in a process group of its own, so that it can be stopped whole. */
export interface Background {
  child: ChildProcess
  /** Resolves with the first stdout line that matches, rejects if the command exits first. */
  lineMatching(pattern: RegExp): Promise<string>
  /** Sends the signal to the whole group; resolves with everything it printed once it exited. */
  stop(signal: NodeJS.Signals): Promise<string>
}

export function startInBackground(command: string, env: NodeJS.ProcessEnv = {}): Background {
  const child = spawn('bash', ['-c', command], {
    cwd: repoRoot,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  })
  let output = ''
  let pending: { pattern: RegExp; resolve: (line: string) => void } | null = null
  const exited = new Promise<number | null>((resolve) => child.once('exit', resolve))
  const check = () => {
    if (!pending) return
    const line = output.split('\n').find((candidate) => pending!.pattern.test(candidate))
    if (line !== undefined) pending.resolve(line)
  }
  child.stdout!.on('data', (chunk: Buffer) => {
    output += chunk
    check()
  })
  child.stderr!.on('data', (chunk: Buffer) => (output += chunk))
  return {
    child,
    lineMatching: (pattern) =>
      new Promise((resolve, reject) => {
        pending = { pattern, resolve }
        check()
        void exited.then((code) =>
          reject(
            new Error(`\`${command}\` exited (${code}) before printing ${pattern}:\n${output}`),
          ),
        )
      }),
    stop: async (signal) => {
      if (child.exitCode === null && child.signalCode === null) process.kill(-child.pid!, signal)
      await exited
      return output
    },
  }
}
