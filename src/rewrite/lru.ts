/** A bounded map that evicts the least recently used entry. */
export class Lru<V> {
  private readonly entries = new Map<string, V>()

  constructor(private readonly capacity: number) {}

  get size(): number {
    return this.entries.size
  }

  get(key: string): V | undefined {
    const value = this.entries.get(key)
    if (value === undefined) return undefined
    this.entries.delete(key)
    this.entries.set(key, value)
    return value
  }

  set(key: string, value: V): void {
    this.entries.delete(key)
    this.entries.set(key, value)
    if (this.entries.size > this.capacity) this.entries.delete(this.entries.keys().next().value!)
  }
}
