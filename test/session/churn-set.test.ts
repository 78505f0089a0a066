import v8 from 'node:v8'
import vm from 'node:vm'
import { describe, expect, it } from 'vitest'
import { ChurnSet } from '../../src/churn-set.js'

/** V8's collector, which Node exposes only under --expose-gc (as src/session/churn-collector.ts). */
function collector(): (options?: { type: 'minor' }) => void {
  v8.setFlagsFromString('--expose-gc')
  return vm.runInNewContext('gc') as (options?: { type: 'minor' }) => void
}

const oldSpaceUsed = () =>
  v8.getHeapSpaceStatistics().find((space) => space.space_name === 'old_space')!.space_used_size

describe('ChurnSet', () => {
  it('adds, removes (once) and iterates what is left', () => {
    const set = new ChurnSet<string>()
    const removeA = set.add('a')
    const removeB = set.add('b')
    set.add('c')
    removeA()
    expect(set.size).toBe(2)
    expect([...set].sort()).toEqual(['b', 'c'])
    removeA()
    expect(set.size).toBe(2)
    const removeD = set.add('d')
    removeB()
    removeD()
    expect([...set]).toEqual(['c'])
  })

  it('lets members be removed while it is iterated', () => {
    const set = new ChurnSet<number>()
    const removers = [1, 2, 3, 4].map((n) => set.add(n))
    const seen: number[] = []
    for (const n of set) {
      seen.push(n)
      removers[n - 1]!()
    }
    expect(seen.sort()).toEqual([1, 2, 3, 4])
    expect(set.size).toBe(0)
  })

  it('keeps no member it let go alive through young-generation collections', () => {
    const gc = collector()
    const set = new ChurnSet<{ payload: number[] }>()
    const live: (() => void)[] = []
    for (let i = 0; i < 8; i++) live.push(set.add({ payload: new Array(100).fill(i) }))
    // The set's own arrays reach the old generation, as a long-lived registry's do.
    gc()
    gc()
    const before = oldSpaceUsed()
    // 6,000 members of about 1 kB, each removed 8 additions later: a Set keeps nearly all of
    // them (5.6 MB) until the next full collection.
    for (let i = 0; i < 6000; i++) {
      live.push(set.add({ payload: new Array(100).fill(i) }))
      live.shift()!()
      if (i % 200 === 0) gc({ type: 'minor' })
    }
    gc({ type: 'minor' })
    gc({ type: 'minor' })
    expect(oldSpaceUsed() - before).toBeLessThan(1_000_000)
  })
})
