import { expect, test } from 'vitest'
import { parseConfig } from '../../src/config/load.js'
import { connectToPrimary, type Upstream } from '../../src/upstream/primary-tracker.js'
import { listedNodes, type UpstreamNode } from '../../src/upstream/upstream-node.js'

/** Two nodes; `current` is followed; `changed` stands for the next check's change of primary. */
function twoNodes() {
  const [a, b] = listedNodes(
    parseConfig({ upstream: { hosts: ['127.0.0.1:1', '127.0.0.1:2'] } }).upstream,
  ) as [UpstreamNode, UpstreamNode]
  let current: UpstreamNode | null = a
  a.primary = true
  const follow = (next: UpstreamNode | null) => {
    if (current) current.primary = false
    if (next) next.primary = true
    current = next
  }
  const upstream = {
    nodes: [a, b],
    following: true,
    current: () => current,
    primary: async () => current ?? b,
  } as unknown as Upstream
  return { a, b, upstream, follow }
}

test('a connection that reached a node as it stopped being the primary is discarded, and the new primary is tried', async () => {
  const { a, b, upstream, follow } = twoNodes()
  const discarded: string[] = []
  const tried: UpstreamNode[] = []
  const connection = await connectToPrimary(
    upstream,
    new AbortController().signal,
    async (node) => {
      tried.push(node)
      // The change of primary lands while the first connection is being made.
      if (node === a) follow(b)
      return `to ${node.name}`
    },
    (made) => discarded.push(made),
  )
  expect(tried).toEqual([a, b])
  expect(discarded).toEqual([`to ${a.name}`])
  expect(connection).toBe(`to ${b.name}`)
})

test('a connection to the primary that stays the primary is kept', async () => {
  const { a, upstream } = twoNodes()
  const discarded: string[] = []
  const connection = await connectToPrimary(
    upstream,
    new AbortController().signal,
    async (node) => `to ${node.name}`,
    (made) => discarded.push(made),
  )
  expect(connection).toBe(`to ${a.name}`)
  expect(discarded).toEqual([])
})
