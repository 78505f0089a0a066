import { nativeAddon } from '../native-addon.js'
import type { Logins } from '../auth/native-login.js'
import type { LinkEventHandler, ServerLinkHandle } from './server-link.js'
import type { BackendKey } from '../wire/backend-key.js'
import type { NativeRelaySettings } from './native-relay.js'

/** An opaque handle on a shelf of server links (src/native/link-shelf.c). */
type Shelf = { readonly brand: unique symbol }

/**
 * The relay's settings as C keeps them for a lent session: the client's message types, then
 * NativeRelaySettings in the relay's order.
 */
export type LentRelaySettings = [
  frontendTypes: string,
  maxMessageBytes: NativeRelaySettings['maxMessageBytes'],
  interceptTypes: NativeRelaySettings['interceptTypes'],
  statementNeedles: NativeRelaySettings['statementNeedles'],
  queryCache: NativeRelaySettings['queryCache'],
]

interface ShelfModule {
  linkShelf(transactionPool: boolean): Shelf
  shelve(
    shelf: Shelf,
    link: ServerLinkHandle,
    packet: Buffer,
    greeting: Buffer,
    settings: LentRelaySettings,
    lendForMs: number,
    reset: Buffer,
    resetQueries: number,
    resetMs: number,
    onEnd: LinkEventHandler,
  ): boolean
  unshelve(shelf: Shelf, link: ServerLinkHandle): boolean
  shelfReturns(shelf: Shelf): (ServerLinkHandle | number | undefined)[] | undefined
  shelfReport(shelf: Shelf): void
  linkResetting(link: ServerLinkHandle): boolean
  loginsLend(logins: Logins, shelf: Shelf): void
}

const NONE_RETURNED: QuietReturn[] = []

const addon =
  typeof nativeAddon?.linkShelf === 'function' ? (nativeAddon as unknown as ShelfModule) : null

/**
 * A link logins lent in C left back on the shelf, JavaScript not told then (LinkShelf.returns):
 * one however many left it since the last look.
 */
export interface QuietReturn {
  /** Undefined for the returns to links no longer on the shelf, whose keys no client has. */
  link: ServerLinkHandle | undefined
  /** The key the link's next client is greeted with. */
  key: BackendKey
  /** The transactions their clients relayed. */
  transactions: number
}

/**
 * Idle server connections a login in C may be lent without JavaScript (lending in C,
 * src/native/login-lend.c): each a server link waiting between sessions, shelved for one
 * startup packet, byte for byte, with the greeting and relay settings its client gets.
 */
export class LinkShelf {
  private constructor(private readonly shelf: Shelf) {}

  /**
   * A shelf the logins of `logins` are lent from; null when the addon was built without it.
   * A transaction pool's gives a lent client's descriptor to JavaScript as a duplicate, which
   * it reads once the relay stops (NativeAcceptor), and takes back without a reset a connection
   * that a client lent quietly left, as JavaScript takes one whose client touched no setting.
   */
  static lendingTo(logins: Logins, transactionPool: boolean): LinkShelf | null {
    if (!addon) return null
    const shelf = addon.linkShelf(transactionPool)
    addon.loginsLend(logins, shelf)
    return new LinkShelf(shelf)
  }

  /**
   * A client whose StartupMessage is `packet` may be lent `link` for `lendForMs` (Infinity: no
   * limit), greeted after its login's answer with `greeting` (ParameterStatus, BackendKeyData,
   * ReadyForQuery) and relayed with `settings`. If it says goodbye cleanly, the link may come
   * back to the shelf in C (the relay's onClose says how), with `reset` (its statements, the
   * first a DISCARD ALL) answered within `resetMs`; C tells `onEnd` of its end once a login
   * lent it quietly left it back on the shelf. False when C no longer watches the link idle (it
   * ended just now, which JavaScript hears of).
   */
  shelve(
    link: ServerLinkHandle,
    packet: Buffer,
    greeting: Buffer,
    settings: LentRelaySettings,
    lendForMs: number,
    reset: { bytes: Buffer; queries: number },
    resetMs: number,
    onEnd: LinkEventHandler,
  ): boolean {
    const lendFor = lendForMs === Infinity ? -1 : lendForMs
    const { bytes, queries } = reset
    return addon!.shelve(
      this.shelf,
      link,
      packet,
      greeting,
      settings,
      lendFor,
      bytes,
      queries,
      resetMs,
      onEnd,
    )
  }

  /** The links logins lent in C left back on the shelf since the last call, each once. */
  returns(): QuietReturn[] {
    const flat = addon!.shelfReturns(this.shelf)
    if (!flat) return NONE_RETURNED
    const returns: QuietReturn[] = []
    for (let at = 0; at < flat.length; at += 4) {
      const [link, processId, secretKey, transactions] = flat.slice(at, at + 4)
      returns.push({
        link: link as ServerLinkHandle | undefined,
        key: { processId: processId as number, secretKey: secretKey as number },
        transactions: transactions as number,
      })
    }
    return returns
  }

  /** Reports every login lent in C that JavaScript has not heard of, now (as LENT). */
  report(): void {
    addon!.shelfReport(this.shelf)
  }

  /** Whether the link came back to the shelf in C with its reset still under way. */
  resetting(link: ServerLinkHandle): boolean {
    return addon!.linkResetting(link)
  }

  /**
   * Takes a link back; false when it was not on the shelf waiting (a login took it, or it ended
   * meanwhile; one whose reset was under way in C is ended, the link told).
   */
  unshelve(link: ServerLinkHandle): boolean {
    return addon!.unshelve(this.shelf, link)
  }
}
