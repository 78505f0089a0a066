import { z } from 'zod'

/**
 * The dotted leaf keys of a zod schema, through defaults, optionals and refinements (pipes).
 * With `items`, the keys of an array of objects are written `key[].item`; else the array is a key.
 */
export function schemaKeys(schema: z.ZodType, items: boolean, prefix = ''): string[] {
  if (
    schema instanceof z.ZodDefault ||
    schema instanceof z.ZodOptional ||
    schema instanceof z.ZodNullable
  )
    return schemaKeys(schema.unwrap() as z.ZodType, items, prefix)
  if (schema instanceof z.ZodPipe) return schemaKeys(schema.in as z.ZodType, items, prefix)
  if (items && schema instanceof z.ZodArray) {
    const item = schema.element as z.ZodType
    return item instanceof z.ZodObject ? schemaKeys(item, items, `${prefix}[]`) : [prefix]
  }
  if (schema instanceof z.ZodObject)
    return Object.entries(schema.shape as Record<string, z.ZodType>).flatMap(([key, value]) =>
      schemaKeys(value, items, prefix ? `${prefix}.${key}` : key),
    )
  return [prefix]
}
