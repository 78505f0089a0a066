/** Quoting for text the rewriter generates. */

/** Always quoted: a bare name could be a keyword. */
export function quoteIdent(name: string): string {
  return `"${name.replace(/"/g, '""')}"`
}

/** `[schema.]name`, each part quoted. */
export const qualifiedName = (schema: string | undefined, name: string): string =>
  [schema, name]
    .filter((part): part is string => part !== undefined)
    .map(quoteIdent)
    .join('.')

/** A string literal that means the same whatever standard_conforming_strings says. */
export function quoteLiteral(value: string): string {
  return value.includes('\\')
    ? `E'${value.replace(/\\/g, '\\\\').replace(/'/g, "\\'")}'`
    : `'${value.replace(/'/g, "''")}'`
}

/** Text matched literally inside a regular expression. */
export const escapeRegex = (text: string): string => text.replace(/[.*+?^${}()|[\]\\-]/g, '\\$&')
