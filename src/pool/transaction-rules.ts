import { tokenize } from '../rewrite/lexer.js'
import { Lru } from '../rewrite/lru.js'

/** The features that would outlive the transaction, on a connection other clients use next. */
export type RefusedFeature =
  | 'LISTEN'
  | 'session advisory locks'
  | 'DECLARE ... WITH HOLD'
  | 'temporary tables kept between transactions'
  | 'temporary views, sequences and functions'

/** What a statement means for transaction pooling, read from its words (never literals). */
export interface StatementEffects {
  /** A feature that cannot outlive the transaction: refused with 0A000. */
  refused: RefusedFeature | null
  /** It may change session settings (SET, RESET, set_config, DISCARD): read them after. */
  touchesSettings: boolean
  /** Prepared statements it drops: all of them, or one name. */
  forgets: 'all' | string | null
  /** The name an SQL PREPARE gives its statement (the same namespace as protocol-level ones). */
  prepares: string | null
}

const SESSION_LOCKS = new Set([
  'pg_advisory_lock',
  'pg_advisory_lock_shared',
  'pg_try_advisory_lock',
  'pg_try_advisory_lock_shared',
])
const SETTING_WORDS = new Set(['set', 'reset', 'discard', 'set_config'])
/** What else CREATE can put in the session's own schema, besides a table. */
const TEMP_OBJECTS = new Set(['view', 'sequence', 'function', 'procedure'])

const sequence = (words: string[], at: number, ...expected: string[]) =>
  expected.every((word, i) => words[at + i] === word)

const NO_EFFECTS: Readonly<StatementEffects> = {
  refused: null,
  touchesSettings: false,
  forgets: null,
  prepares: null,
}
/**
 * Every rule below starts from one of these words (ASCII case folded, as the lexer's words
 * are): a text without any of them has no effects, and is not lexed.
 */
export const RULE_WORDS = [
  'set',
  'discard',
  'listen',
  'advisory',
  'declare',
  'create',
  'deallocate',
  'prepare',
] as const
const ruleWord = new RegExp(RULE_WORDS.join('|'), 'i')
/** Clients repeat their statements: each text is lexed once (shared by every pool's sessions). */
const cache = new Lru<Readonly<StatementEffects>>(4096)
/** Longer texts are lexed each time rather than held. */
const MAX_CACHED_TEXT = 16 * 1024

export function statementEffects(sql: string): Readonly<StatementEffects> {
  if (!ruleWord.test(sql)) return NO_EFFECTS
  let effects = cache.get(sql)
  if (effects === undefined) {
    effects = lexedEffects(sql)
    if (sql.length <= MAX_CACHED_TEXT) cache.set(sql, effects)
  }
  return effects
}

function lexedEffects(sql: string): StatementEffects {
  const words = tokenize(sql)
    .filter(
      (token) => token.kind === 'word' || (token.kind === 'other' && sql[token.start] === ';'),
    )
    .map((token) => sql.slice(token.start, token.end).toLowerCase())
  return {
    refused: refusedFeature(words),
    touchesSettings: words.some((word) => SETTING_WORDS.has(word)),
    forgets: forgottenStatements(words),
    prepares: preparedName(words),
  }
}

function refusedFeature(words: string[]): RefusedFeature | null {
  for (let i = 0; i < words.length; i++) {
    const word = words[i]!
    const starts = i === 0 || words[i - 1] === ';'
    if (starts && word === 'listen') return 'LISTEN'
    if (SESSION_LOCKS.has(word)) return 'session advisory locks'
    if (starts && word === 'declare' && holdsCursor(words, i)) return 'DECLARE ... WITH HOLD'
    const kept = starts && word === 'create' ? keptTempObject(words, i) : null
    if (kept) return kept
  }
  return null
}

const statementEnd = (words: string[], from: number) => {
  const end = words.indexOf(';', from)
  return end < 0 ? words.length : end
}

function holdsCursor(words: string[], at: number): boolean {
  for (let i = at; i < statementEnd(words, at); i++)
    if (sequence(words, i, 'with', 'hold')) return true
  return false
}

/**
 * What a CREATE makes in the session's own schema (TEMP, or named in pg_temp) that outlives the
 * transaction: a table without ON COMMIT DROP, or a view, sequence, function or procedure.
 */
function keptTempObject(words: string[], at: number): RefusedFeature | null {
  let i = at + 1
  if (sequence(words, i, 'or', 'replace')) i += 2
  if (words[i] === 'local' || words[i] === 'global') i++
  const keyword = words[i] === 'temp' || words[i] === 'temporary'
  if (keyword) i++
  if (words[i] === 'recursive') i++
  const kind = words[i]
  let name = i + 1
  if (sequence(words, name, 'if', 'not', 'exists')) name += 3
  if (!keyword && words[name] !== 'pg_temp') return null
  if (kind === 'table') {
    for (let j = name; j < statementEnd(words, at); j++)
      if (sequence(words, j, 'on', 'commit', 'drop')) return null
    return 'temporary tables kept between transactions'
  }
  return TEMP_OBJECTS.has(kind ?? '') ? 'temporary views, sequences and functions' : null
}

function forgottenStatements(words: string[]): 'all' | string | null {
  for (let i = 0; i < words.length; i++) {
    if (sequence(words, i, 'discard', 'all')) return 'all'
    if (words[i] !== 'deallocate') continue
    const name = words[i + 1] === 'prepare' ? words[i + 2] : words[i + 1]
    return name === undefined || name === 'all' || name === ';' ? 'all' : name
  }
  return null
}

function preparedName(words: string[]): string | null {
  for (let i = 0; i < words.length; i++) {
    const starts = i === 0 || words[i - 1] === ';'
    const name = words[i + 1]
    if (starts && words[i] === 'prepare' && name !== undefined && name !== 'transaction')
      return name
  }
  return null
}
