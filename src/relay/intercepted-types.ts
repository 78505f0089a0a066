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
 * the server's close is expected), the others as `interception` asks.
 */
export function interceptedTypes({ statements, bind, close }: Interception): number[] {
  if (!statements) return [Frontend.Terminate]
  const types = [Frontend.Query, Frontend.Parse]
  if (close) types.push(Frontend.Close)
  types.push(Frontend.Terminate)
  if (bind) types.push(Frontend.Bind)
  return types
}

/** The same set as the native relay takes it: one character per type. */
export const interceptedTypeChars = (interception: Interception): string =>
  String.fromCharCode(...interceptedTypes(interception))

const tables = new Map<string, Uint8Array>()

/** The same set as the JavaScript framer takes it: a 256-entry table, built once per set. */
export function interceptedTypeTable(interception: Interception): Uint8Array {
  const chars = interceptedTypeChars(interception)
  let table = tables.get(chars)
  if (!table) {
    table = typeTable(interceptedTypes(interception))
    tables.set(chars, table)
  }
  return table
}
