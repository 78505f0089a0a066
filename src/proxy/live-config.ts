import { loadConfigFile } from '../config/load.js'
import { keysNeedingRestart, reloadableConfig, type KeptKey } from '../config/reload.js'
import type { Config } from '../config/schema.js'
import type { Logger } from '../log.js'
import {
  cacheLookups,
  sessionSettings,
  type CacheLookups,
  type SessionSettings,
  type SettingsHolder,
  type SettingsOptions,
} from '../fencing/live-settings.js'
import type { RegisteredSession } from '../session/session-registry.js'

/**
 * One step of putting a reloaded config in force, for what is made from the config once (pools,
 * credentials, timers): it prepares for `next` and may throw to refuse it, before anything
 * changed; the function it returns puts `next` in force and must not fail.
 */
export type ReloadStep = (next: Config) => () => void

/**
 * The config in force and the session settings made from it, replaced whole by a reload (SIGHUP,
 * the console's RELOAD): every session applies the new rules and limits from its next statement.
 * Everything that reads the config reads it here, never a copy taken at start.
 */
export class LiveConfig {
  /** Rewrite cache lookups of settings a reload replaced, so the metric never goes back. */
  private retired: CacheLookups = { hits: 0, misses: 0 }
  private readonly steps: ReloadStep[] = []

  private constructor(
    readonly settings: SettingsHolder,
    private readonly nativeRelay: boolean,
    private readonly logger: Logger,
    private readonly configFile: string | undefined,
  ) {}

  static async create(
    config: Config,
    nativeRelay: boolean,
    logger: Logger,
    options: SettingsOptions & { configFile?: string },
  ): Promise<LiveConfig> {
    const current = await sessionSettings(config, nativeRelay, logger, options)
    return new LiveConfig({ current }, nativeRelay, logger, options.configFile)
  }

  /** The config in force: the file's as of the last reload, restart-only keys as at start. */
  get config(): Config {
    return this.settings.current.config
  }

  /** Adds a step to each reload that takes effect. */
  onReload(step: ReloadStep): void {
    this.steps.push(step)
  }

  cacheLookups(): CacheLookups {
    const live = cacheLookups(this.settings.current)
    return { hits: this.retired.hits + live.hits, misses: this.retired.misses + live.misses }
  }

  /**
   * Re-reads the config file and puts it in force for `sessions` and those to come. An invalid
   * file is refused (logged, and thrown) and the running config stays; keys read only at start
   * keep their value and are logged by name.
   */
  async reload(sessions: Iterable<RegisteredSession>): Promise<void> {
    if (!this.configFile) throw new Error('pgfence was started without a config file')
    let kept: KeptKey[]
    let settings: SessionSettings
    let commits: (() => void)[]
    try {
      const loaded = loadConfigFile(this.configFile)
      kept = keysNeedingRestart(this.config, loaded)
      const next = reloadableConfig(this.config, loaded)
      settings = await sessionSettings(next, this.nativeRelay, this.logger)
      commits = this.steps.map((step) => step(next))
    } catch (err) {
      this.logger.error(
        { reason: (err as Error).message },
        'configuration reload refused: the running configuration stays in force',
      )
      throw err
    }
    for (const { key, running: value, file } of kept)
      this.logger.warn(
        { key, running: value ?? null, file: file ?? null },
        `configuration reload: ${key} needs a restart; its running value stays in force`,
      )
    this.replace(settings)
    for (const commit of commits) commit()
    for (const session of sessions) session.reconfigure()
    this.logger.info(
      {
        fencedTables: this.config.fencing.tables.length,
        fencedResources: this.config.fencing.resources.length,
        needRestart: kept.map(({ key }) => key),
      },
      'configuration reloaded',
    )
  }

  private replace(settings: SessionSettings): void {
    this.retired = this.cacheLookups()
    this.settings.current = settings
    this.logger.level = settings.config.log.level
  }
}
