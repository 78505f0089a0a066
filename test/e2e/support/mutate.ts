/** Seeded random changes to protocol bytes, for the end-to-end fuzz tests. */

/** mulberry32: a seeded generator, so a failing case can be replayed. */
export function generator(seed: number): () => number {
  let state = seed >>> 0
  return () => {
    state = (state + 0x6d2b79f5) >>> 0
    let t = state
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

/** Flips, inserts, deletes and truncates bytes at random places. */
export function mutate(bytes: Buffer, random: () => number): Buffer {
  let out = Buffer.from(bytes)
  const mutations = 1 + Math.floor(random() * 4)
  for (let i = 0; i < mutations; i++) {
    const at = Math.floor(random() * out.length)
    const kind = Math.floor(random() * 4)
    if (kind === 0) out[at] = Math.floor(random() * 256)
    else if (kind === 1) {
      const noise = Buffer.from(
        Array.from({ length: 1 + Math.floor(random() * 8) }, () => Math.floor(random() * 256)),
      )
      out = Buffer.concat([out.subarray(0, at), noise, out.subarray(at)])
    } else if (kind === 2)
      out = Buffer.concat([out.subarray(0, at), out.subarray(at + 1 + Math.floor(random() * 16))])
    else out = out.subarray(0, at)
  }
  return out
}
