import { Frontend, typeTable } from '../wire/protocol.js'

/** What a relay must see of the client's messages. */
export interface Interception {
  /** Query and Parse, whose SQL text is rewritten or checked. */
  statements: boolean
  /** Bind too, to log the execution of named statements under pgfence.maintenance. */
  bind: boolean
  /** Close too, where the relay keeps the client's prepared statements itself. */
  close?: boolean
}

/**
 * The message types a relay hands over whole: Terminate always (a clean goodbye, after which
 * the server's close is expected; the native relay keeps it for itself, native-relay.ts's
 * keepsServer), the others as `interception` asks.
 */
export function interceptedTypes({ statements, bind, close }: Interception): number[] {
  if (!statements) return [Frontend.Terminate]
  const types = [Frontend.Query, Frontend.Parse]
  if (close) types.push(Frontend.Close)
  types.push(Frontend.Terminate)
  if (bind) types.push(Frontend.Bind)
  return types
}

/** A set of intercepted types in both relays' forms, made once per Interception. */
interface TypeSet {
  /** As the native relay takes it: one character per type. */
  chars: string
  /** As the JavaScript framer takes it: a 256-entry table. */
  table: Uint8Array
}

const sets = new Map<number, TypeSet>()

function typeSet(interception: Interception): TypeSet {
  const { statements, bind, close = false } = interception
  const key = Number(statements) | (Number(bind) << 1) | (Number(close) << 2)
  let set = sets.get(key)
  if (!set) {
    const types = interceptedTypes(interception)
    set = { chars: String.fromCharCode(...types), table: typeTable(types) }
    sets.set(key, set)
  }
  return set
}

/** The same set as the native relay takes it: one character per type. */
export const interceptedTypeChars = (interception: Interception): string =>
  typeSet(interception).chars

/** The same set as the JavaScript framer takes it: a 256-entry table, built once per set. */
export const interceptedTypeTable = (interception: Interception): Uint8Array =>
  typeSet(interception).table
