import { serialize } from 'pg-protocol'

/** Raw protocol bytes, built independently of the code under test (by node-postgres's own serializer). */

export function typed(type: string, body: Buffer | string): Buffer {
  const payload = typeof body === 'string' ? Buffer.from(body, 'utf8') : body
  const header = Buffer.alloc(5)
  header.write(type, 0, 'latin1')
  header.writeUInt32BE(payload.length + 4, 1)
  return Buffer.concat([header, payload])
}

export const query = (sql: string): Buffer => serialize.query(sql)

export const parse = (name: string, text: string, types: number[] = []): Buffer =>
  serialize.parse({ name, text, types })

export const sync = (): Buffer => serialize.sync()

/** Every way to cut `bytes` into two pieces, then into three at a fixed stride. */
export function* splits(bytes: Buffer): Generator<Buffer[]> {
  for (let i = 0; i <= bytes.length; i++) yield [bytes.subarray(0, i), bytes.subarray(i)]
  for (let i = 1; i < bytes.length; i += 3) {
    for (let j = i; j < bytes.length; j += 7) {
      yield [bytes.subarray(0, i), bytes.subarray(i, j), bytes.subarray(j)]
    }
  }
}
