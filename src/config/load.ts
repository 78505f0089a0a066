import { readFileSync } from 'node:fs'
import { parse as parseYaml } from 'yaml'
import { configSchema, type Config } from './schema.js'

export class ConfigError extends Error {
  override name = 'ConfigError'
}

/** Validates a parsed config object; every problem names its key path. */
export function parseConfig(raw: unknown, source = 'config'): Config {
  const result = configSchema.safeParse(raw ?? {})
  if (result.success) return result.data
  const problems = result.error.issues.map((issue) => {
    const key = issue.path.length > 0 ? issue.path.join('.') : '(top level)'
    const unknown =
      issue.code === 'unrecognized_keys' ? `unknown key(s) ${issue.keys.join(', ')}` : issue.message
    return `  ${key}: ${unknown}`
  })
  throw new ConfigError(`invalid ${source}:\n${problems.join('\n')}`)
}

export function loadConfigFile(path: string): Config {
  let text: string
  try {
    text = readFileSync(path, 'utf8')
  } catch (err) {
    throw new ConfigError(`cannot read config ${path}: ${(err as Error).message}`)
  }
  let raw: unknown
  try {
    raw = parseYaml(text)
  } catch (err) {
    throw new ConfigError(`config ${path} is not valid YAML: ${(err as Error).message}`)
  }
  return parseConfig(raw, `config ${path}`)
}

export const defaultConfig = (): Config => parseConfig({})
