import { XMLParser, XMLValidator } from 'fast-xml-parser'

/** A node of fast-xml-parser's ordered output: `{ tag: children, ':@': attributes }` or text. */
type OrderedNode = Record<string, unknown>

export interface Element {
  tag: string
  attrs: Record<string, string>
  children: OrderedNode[]
  /** The element's own text, joined. */
  text: string
}

/** The `pgfence demo --html` page, which must be well-formed XML (XHTML), as ordered nodes. */
export function parseTimelinePage(html: string): OrderedNode[] {
  const valid = XMLValidator.validate(html)
  if (valid !== true) throw new Error(`not well-formed: ${JSON.stringify(valid.err)}`)
  return new XMLParser({
    ignoreAttributes: false,
    attributeNamePrefix: '',
    preserveOrder: true,
    parseAttributeValue: false,
    parseTagValue: false,
    trimValues: false,
  }).parse(html) as OrderedNode[]
}

/** Every element under `nodes`, depth first, in document order. */
export function elementsOf(nodes: OrderedNode[]): Element[] {
  const found: Element[] = []
  for (const node of nodes) {
    const tag = Object.keys(node).find((key) => key !== ':@' && key !== '#text')
    if (tag === undefined) continue
    const children = node[tag] as OrderedNode[]
    found.push({
      tag,
      attrs: (node[':@'] ?? {}) as Record<string, string>,
      children,
      text: children.map((child) => child['#text'] ?? '').join(''),
    })
    found.push(...elementsOf(children))
  }
  return found
}
