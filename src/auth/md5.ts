import { createHash, randomBytes, timingSafeEqual } from 'node:crypto'

const md5hex = (...parts: (string | Buffer)[]): string => {
  const hash = createHash('md5')
  for (const part of parts) hash.update(part)
  return hash.digest('hex')
}

/** PostgreSQL's stored md5 secret: `md5` + md5(password + user). */
export const md5Secret = (password: string, user: string): string => `md5${md5hex(password, user)}`

/** The answer to AuthenticationMD5Password: `md5` + md5(hex of the secret + salt). */
export const md5Response = (secret: string, salt: Buffer): string =>
  `md5${md5hex(secret.slice(3), salt)}`

export const md5Salt = (): Buffer => randomBytes(4)

export const sameText = (a: string, b: string): boolean => {
  const [x, y] = [Buffer.from(a), Buffer.from(b)]
  return x.length === y.length && timingSafeEqual(x, y)
}

export const isMd5Secret = (text: string): boolean => /^md5[0-9a-f]{32}$/.test(text)
