import { readdirSync, readFileSync } from 'node:fs'
import path from 'node:path'
import { describe, expect, it } from 'vitest'

/**
 * The rooms of src/, lowest first: a module imports only from its own room or one listed
 * before it. The files at the top of src/ are `base` (log.ts, native-addon.ts), except
 * index.ts, the package's entry, which may import from anywhere.
 */
const ROOM_ORDER = [
  'base',
  'config',
  'rewrite',
  'schema',
  'lease',
  'wire',
  'net',
  'upstream',
  'client',
  'auth',
  'server',
  'relay',
  'fencing',
  'pool',
  'session',
  'admin',
  'proxy',
  'dev',
  'cli',
  'index',
]

const SRC = path.resolve(import.meta.dirname, '../../src')
const SPECIFIER = /(?:\bfrom\s*|\bimport\s*\(\s*|\bimport\s+)['"](\.{1,2}\/[^'"]+)['"]/g

interface Import {
  from: string
  to: string
}

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const full = path.join(dir, entry.name)
    if (entry.isDirectory()) return sourceFiles(full)
    return entry.name.endsWith('.ts') ? [full] : []
  })
}

function roomOf(file: string): string {
  const parts = path.relative(SRC, file).split(path.sep)
  if (parts.length > 1) return parts[0]
  return parts[0] === 'index.ts' ? 'index' : 'base'
}

function relativeImports(): Import[] {
  return sourceFiles(SRC).flatMap((file) =>
    [...readFileSync(file, 'utf8').matchAll(SPECIFIER)].map((match) => ({
      from: file,
      to: path.resolve(path.dirname(file), match[1]).replace(/\.js$/, '.ts'),
    })),
  )
}

const name = (file: string) => path.relative(SRC, file)

/** Room-to-room cycles, as one room path per strongly connected set of more than one room. */
function roomCycles(edges: Map<string, Set<string>>): string[][] {
  const cycles: string[][] = []
  const index = new Map<string, number>()
  const low = new Map<string, number>()
  const stack: string[] = []
  const onStack = new Set<string>()
  const visit = (room: string) => {
    index.set(room, index.size)
    low.set(room, index.get(room)!)
    stack.push(room)
    onStack.add(room)
    for (const next of edges.get(room) ?? []) {
      if (!index.has(next)) {
        visit(next)
        low.set(room, Math.min(low.get(room)!, low.get(next)!))
      } else if (onStack.has(next)) {
        low.set(room, Math.min(low.get(room)!, index.get(next)!))
      }
    }
    if (low.get(room) === index.get(room)) {
      const set: string[] = []
      let member: string
      do {
        member = stack.pop()!
        onStack.delete(member)
        set.push(member)
      } while (member !== room)
      if (set.length > 1) cycles.push(set.reverse())
    }
  }
  for (const room of edges.keys()) if (!index.has(room)) visit(room)
  return cycles
}

describe('imports between the rooms of src/', () => {
  const imports = relativeImports()

  it('finds the imports it checks', () => {
    expect(imports.length).toBeGreaterThan(300)
    expect(imports.some((i) => roomOf(i.from) === 'session' && roomOf(i.to) === 'wire')).toBe(true)
  })

  it('places every room in the declared order', () => {
    const rooms = new Set(sourceFiles(SRC).map(roomOf))
    expect([...rooms].filter((room) => !ROOM_ORDER.includes(room)).sort()).toEqual([])
  })

  it('has no import cycle between rooms', () => {
    const edges = new Map<string, Set<string>>()
    for (const { from, to } of imports) {
      const [a, b] = [roomOf(from), roomOf(to)]
      if (a === b) continue
      if (!edges.has(a)) edges.set(a, new Set())
      edges.get(a)!.add(b)
    }
    expect(roomCycles(edges)).toEqual([])
  })

  it('imports only from its own room or a lower one', () => {
    const upward = imports
      .filter(({ from, to }) => ROOM_ORDER.indexOf(roomOf(to)) > ROOM_ORDER.indexOf(roomOf(from)))
      .map(({ from, to }) => `${name(from)} -> ${name(to)}`)
    expect(upward).toEqual([])
  })
})
