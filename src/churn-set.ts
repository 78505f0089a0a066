/**
 * A set of objects that join and leave all the time (client connections, sessions), kept in an
 * array rather than a Map or Set. V8 gives a Map or Set a new table whenever deletions have
 * filled the old one, and the old table keeps a link to its successor: once one table of the
 * chain has reached the old generation, every later table, with every member it ever held,
 * survives young-generation collections until the next full one. For a proxy's registries
 * that holds every closed session until then, and the copying and full collections cost a
 * login tens of µs (docs/performance.md). A slot array has no such links.
 */
export class ChurnSet<T> implements Iterable<T> {
  /** Each member with its position, which the function that removes it reads. */
  private readonly slots: { member: T; index: number }[] = []

  get size(): number {
    return this.slots.length
  }

  /** Adds `member`; returns the function that removes it (later calls do nothing). */
  add(member: T): () => void {
    const slot = { member, index: this.slots.length }
    this.slots.push(slot)
    return () => this.remove(slot)
  }

  /** The members as they are now: removing some while iterating is safe. */
  [Symbol.iterator](): Iterator<T> {
    return this.slots.map((slot) => slot.member)[Symbol.iterator]()
  }

  /** The last slot takes the removed one's place. */
  private remove(slot: { member: T; index: number }): void {
    const index = slot.index
    if (index < 0) return
    slot.index = -1
    const last = this.slots.pop()!
    if (last === slot) return
    this.slots[index] = last
    last.index = index
  }
}
