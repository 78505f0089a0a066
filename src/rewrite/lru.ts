/**
 * A bounded cache that keeps what is used: entries live in a young generation, and when it is
 * full it becomes the old one (the previous old one is dropped); a hit in the old generation
 * moves the entry back to the young one. A hit in the young generation is one map lookup, which
 * matters on the proxy's hot path, and at most `capacity` entries are kept.
 */
export class Lru<V> {
  private young = new Map<string, V>()
  private old = new Map<string, V>()
  private readonly generation: number
  /** Lookups so far, for metrics. */
  hits = 0
  misses = 0

  constructor(capacity: number) {
    this.generation = Math.max(1, Math.floor(capacity / 2))
  }

  get size(): number {
    return this.young.size + this.old.size
  }

  get(key: string): V | undefined {
    const value = this.young.get(key)
    if (value !== undefined) {
      this.hits++
      return value
    }
    const aged = this.old.get(key)
    if (aged !== undefined) {
      this.hits++
      this.old.delete(key)
      this.set(key, aged)
    } else {
      this.misses++
    }
    return aged
  }

  set(key: string, value: V): void {
    this.young.set(key, value)
    if (this.young.size >= this.generation) {
      this.old = this.young
      this.young = new Map()
    }
  }
}
