import { nativeAddon, type ServerLinkHandle } from '../native-addon.js'
import { LinkEvent } from './link-events.js'

export type { ServerLinkHandle }

/** What C tells of a link (src/native/server-link.h). */
export type LinkEventHandler = (event: LinkEvent, statuses: Buffer) => void

interface ServerLinkModule {
  linkReset(
    link: ServerLinkHandle,
    bytes: Buffer,
    readyCount: number,
    onEvent: LinkEventHandler,
  ): void
  linkClose(link: ServerLinkHandle): void
  linkWatch(fd: number, onEvent: LinkEventHandler): ServerLinkHandle
}

const addon = nativeAddon as ServerLinkModule | null
const EMPTY = Buffer.alloc(0)

/**
 * A pooled server connection's descriptor that C went on watching when its client left cleanly
 * (src/native/server-link.h): C writes the reset and reads its answer, then watches the
 * connection until the next session's relay takes it (take) or it is closed. A transaction
 * pool's idle connection gets one as it is (watching). Its Node socket does not read meanwhile.
 */
export class ServerLink {
  /** The link still holds the descriptor (not closed, not taken by a relay). */
  private held = true
  private waiting = false

  /** `onEnd`: the server closed or sent something while the connection waited (the link closed). */
  constructor(
    private readonly handle: ServerLinkHandle,
    private readonly onEnd: () => void,
  ) {}

  /** Whether links can be made on descriptors (the addon is loaded). */
  static readonly canWatch = typeof addon?.linkWatch === 'function'

  /**
   * A link on the descriptor of an idle connection JavaScript relayed last (its socket stopped
   * reading): it waits as after a clean reset; `onEnd` as the constructor's.
   */
  static watching(fd: number, onEnd: () => void): ServerLink {
    const box: { link?: ServerLink } = {}
    const handle = addon!.linkWatch(fd, () => box.link!.ended())
    const link = (box.link = new ServerLink(handle, onEnd))
    link.waiting = true
    return link
  }

  /** C closed the waiting link: the server closed or sent something. */
  private ended(): void {
    const held = this.held
    this.held = this.waiting = false
    if (held) this.onEnd()
  }

  /**
   * Writes `bytes` (`readyCount` simple Queries, the first a DISCARD ALL) and reads the answers:
   * `done` gets the ParameterStatus messages among them once they came back clean, else null
   * (the link is closed then). Past `timeoutMs` the link closes and `done` gets null. A
   * callback, not a promise: this runs at every session's end.
   */
  reset(
    bytes: Buffer,
    readyCount: number,
    timeoutMs: number,
    done: (statuses: Buffer | null) => void,
  ): void {
    const timer = setTimeout(() => {
      this.close()
      done(null)
    }, timeoutMs)
    const onEvent = (event: LinkEvent, statuses: Buffer) => {
      clearTimeout(timer)
      if (event === LinkEvent.Reset) {
        this.waiting = true
        return done(statuses)
      }
      const waited = this.waiting
      this.held = this.waiting = false
      if (event === LinkEvent.Ended && waited) return this.onEnd()
      done(null)
    }
    try {
      addon!.linkReset(this.handle, bytes, readyCount, onEvent)
    } catch {
      // A link a relay holds: not one to reset (the connection is not reused).
      onEvent(LinkEvent.Failed, EMPTY)
    }
  }

  /**
   * C took the link back onto its shelf with the reset under way there (lending in C): it waits
   * as after a clean reset, and C tells the returned function only of its end.
   */
  onShelf(): LinkEventHandler {
    this.waiting = true
    return () => this.ended()
  }

  /** The handle while the link waits after a clean reset (it stays the link's); else null. */
  waitingHandle(): ServerLinkHandle | null {
    return this.held && this.waiting ? this.handle : null
  }

  /** For a relay to take over: the handle, once the reset came back clean; else null. */
  take(): ServerLinkHandle | null {
    if (!this.held || !this.waiting) return null
    this.held = this.waiting = false
    return this.handle
  }

  /** Closes the link's descriptor (the connection's socket stays open). Idempotent. */
  close(): void {
    if (!this.held) return
    this.held = this.waiting = false
    addon!.linkClose(this.handle)
  }
}
