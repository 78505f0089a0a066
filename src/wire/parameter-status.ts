/** The name and value a ParameterStatus message reports (both NUL-terminated UTF-8). */
export function decodeParameterStatus(message: Buffer): { name: string; value: string } {
  const nameEnd = message.indexOf(0, 5)
  const valueEnd = nameEnd < 0 ? -1 : message.indexOf(0, nameEnd + 1)
  if (valueEnd < 0) return { name: '', value: '' }
  return {
    name: message.toString('utf8', 5, nameEnd),
    value: message.toString('utf8', nameEnd + 1, valueEnd),
  }
}
