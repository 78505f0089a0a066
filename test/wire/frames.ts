/** Builders for raw protocol bytes, written independently of the code under test. */

export function typed(type: string, body: Buffer | string): Buffer {
  const payload = typeof body === 'string' ? Buffer.from(body, 'utf8') : body
  const header = Buffer.alloc(5)
  header.write(type, 0, 'latin1')
  header.writeUInt32BE(payload.length + 4, 1)
  return Buffer.concat([header, payload])
}

export const query = (sql: string): Buffer => typed('Q', `${sql}\0`)

export function parse(name: string, sql: string, types: number[] = []): Buffer {
  const count = Buffer.alloc(2 + 4 * types.length)
  count.writeUInt16BE(types.length, 0)
  types.forEach((oid, i) => count.writeUInt32BE(oid, 2 + 4 * i))
  return typed('P', Buffer.concat([Buffer.from(`${name}\0${sql}\0`), count]))
}

export const sync = (): Buffer => typed('S', Buffer.alloc(0))

/** Every way to cut `bytes` into two pieces, then into three at a fixed stride. */
export function* splits(bytes: Buffer): Generator<Buffer[]> {
  for (let i = 0; i <= bytes.length; i++) yield [bytes.subarray(0, i), bytes.subarray(i)]
  for (let i = 1; i < bytes.length; i += 3) {
    for (let j = i; j < bytes.length; j += 7) {
      yield [bytes.subarray(0, i), bytes.subarray(i, j), bytes.subarray(j)]
    }
  }
}
