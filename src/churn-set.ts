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
  private readonly members: T[] = []
  /** Each member's position, shared with the function that removes it. */
  private readonly slots: { index: number }[] = []

  get size(): number {
    return this.members.length
  }

  /** Adds `member`; returns the function that removes it (later calls do nothing). */
  add(member: T): () => void {
    const slot = { index: this.members.length }
    this.members.push(member)
    this.slots.push(slot)
    return () => this.remove(slot)
  }

  /** The members as they are now: removing some while iterating is safe. */
  [Symbol.iterator](): Iterator<T> {
    return this.members.slice()[Symbol.iterator]()
  }

  /** The last member takes the removed one's place. */
  private remove(slot: { index: number }): void {
    const index = slot.index
    if (index < 0) return
    slot.index = -1
    const lastMember = this.members.pop()!
    const lastSlot = this.slots.pop()!
    if (lastSlot === slot) return
    this.members[index] = lastMember
    this.slots[index] = lastSlot
    lastSlot.index = index
  }
}
