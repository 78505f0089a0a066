import { tokenize } from './lexer.js'
import { markerPlaceholder } from './statement-marker.js'

/** A rewritten text with holes where the placeholders `$base...` stand. */
export interface Template {
  parts: string[]
  /** holes[i] is the index into the values that goes between parts[i] and parts[i + 1]. */
  holes: number[]
}

export function toTemplate(text: string, base: number): Template {
  const parts: string[] = []
  const holes: number[] = []
  let copied = 0
  // The statement marker's token sits inside a comment, where the lexer sees no placeholder.
  const marker = markerPlaceholder(text)
  if (marker && marker.number >= base) {
    parts.push(text.slice(0, marker.start))
    holes.push(marker.number - base)
    copied = marker.end
  }
  for (const token of tokenize(text)) {
    if (token.kind !== 'param') continue
    const number = Number(text.slice(token.start + 1, token.end))
    if (number < base) continue
    parts.push(text.slice(copied, token.start))
    holes.push(number - base)
    copied = token.end
  }
  parts.push(text.slice(copied))
  return { parts, holes }
}

export function fillTemplate(template: Template, values: string[]): string {
  let text = template.parts[0]!
  for (let i = 0; i < template.holes.length; i++) {
    text += values[template.holes[i]!]! + template.parts[i + 1]!
  }
  return text
}
