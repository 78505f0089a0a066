import { describe, expect, test } from 'vitest'
import {
  deriveKeys,
  parseVerifier,
  ScramClientExchange,
  ScramServerExchange,
  verifierFromPassword,
} from '../../src/auth/scram.js'
import { createHash } from 'node:crypto'
import { parseUserlist } from '../../src/auth/userlist.js'
import { parseSecret } from '../../src/auth/secret.js'
import { md5Response, md5Secret } from '../../src/auth/md5.js'

/** RFC 7677, section 3: user "user", password "pencil". */
const rfc = {
  salt: Buffer.from('W22ZaJ0SNY7soEsUEjb6gQ==', 'base64'),
  clientFirst: 'n,,n=user,r=rOprNGfwEbeRWgbNEkqO',
  serverNonce: '%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0',
  serverFirst:
    'r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096',
  clientFinal:
    'c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=',
  serverFinal: 'v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=',
}

function rfcVerifier() {
  const { clientKey, serverKey } = deriveKeys('pencil', rfc.salt, 4096)
  const storedKey = createHash('sha256').update(clientKey).digest()
  return { verifier: { iterations: 4096, salt: rfc.salt, storedKey, serverKey }, clientKey }
}

describe('SCRAM-SHA-256', () => {
  test('the server side replays RFC 7677 and recovers the ClientKey from the proof', () => {
    const { verifier, clientKey } = rfcVerifier()
    const exchange = new ScramServerExchange(verifier, rfc.serverNonce)
    expect(exchange.start(rfc.clientFirst)).toBe(rfc.serverFirst)
    const result = exchange.finish(rfc.clientFinal)
    expect(result?.serverFinal).toBe(rfc.serverFinal)
    expect(result?.keys.clientKey.equals(clientKey)).toBe(true)
  })

  test('a wrong proof is refused', () => {
    const { verifier } = rfcVerifier()
    const exchange = new ScramServerExchange(verifier, rfc.serverNonce)
    exchange.start(rfc.clientFirst)
    const wrong = rfc.clientFinal.replace('p=dHzb', 'p=dHzc')
    expect(exchange.finish(wrong)).toBeNull()
  })

  test('the client side logs in with recovered keys and checks the server signature', () => {
    const { verifier, clientKey } = rfcVerifier()
    const client = new ScramClientExchange(() => ({ clientKey, serverKey: verifier.serverKey }))
    const server = new ScramServerExchange(verifier)
    const final = server.finish(client.final(server.start(client.first())))
    expect(final).not.toBeNull()
    expect(client.verify(final!.serverFinal)).toBe(true)
    expect(client.verify('v=' + Buffer.alloc(32).toString('base64'))).toBe(false)
  })

  test('verifiers are read as PostgreSQL stores them', () => {
    const made = verifierFromPassword('pencil')
    const text = `SCRAM-SHA-256$${made.iterations}:${made.salt.toString('base64')}$${made.storedKey.toString('base64')}:${made.serverKey.toString('base64')}`
    expect(parseVerifier(text)).toEqual(made)
    expect(parseSecret(text)).toEqual({ kind: 'scram', verifier: made })
    expect(parseVerifier('SCRAM-SHA-256$4096:abc$short:short')).toBeNull()
  })
})

describe('userlist and md5', () => {
  test('PgBouncer userlist lines, comments and doubled quotes', () => {
    const users = parseUserlist(
      '; comment\n# another\n\n"alice" "md5abc"\n"bob ""b""" "SCRAM-SHA-256$x" extra\n',
    )
    expect([...users]).toEqual([
      ['alice', 'md5abc'],
      ['bob "b"', 'SCRAM-SHA-256$x'],
    ])
    expect(() => parseUserlist('"lonely"\n')).toThrow(/line 1/)
  })

  test('md5 secrets and responses match PostgreSQL', () => {
    // md5('secret' + 'alice') as PostgreSQL stores it, then md5(hex + salt).
    const md5hex = (bytes: string | Buffer) => createHash('md5').update(bytes).digest('hex')
    expect(md5Secret('secret', 'alice')).toBe(`md5${md5hex('secretalice')}`)
    const salt = Buffer.from([1, 2, 3, 4])
    const expected =
      'md5' +
      createHash('md5')
        .update(Buffer.concat([Buffer.from(md5Secret('secret', 'alice').slice(3)), salt]))
        .digest('hex')
    expect(md5Response(md5Secret('secret', 'alice'), salt)).toBe(expected)
    expect(parseSecret(md5Secret('secret', 'alice')).kind).toBe('md5')
    expect(parseSecret('plain words').kind).toBe('plain')
  })
})
