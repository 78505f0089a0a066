import { loadConfigFile } from '../config/load.js'
import { keysNeedingRestart, reloadableConfig } from '../config/reload.js'
import type { Config } from '../config/schema.js'
import type { Logger } from '../log.js'
import {
  cacheLookups,
  sessionSettings,
  type CacheLookups,
  type SessionSettings,
  type SettingsHolder,
  type SettingsOptions,
} from './live-settings.js'
import type { RegisteredSession } from './session-registry.js'

/**
 * The config in force and the session settings made from it, replaced whole by a reload (SIGHUP,
 * the console's RELOAD): every session applies the new rules and limits from its next statement.
 */
export class LiveConfig {
  /** Rewrite cache lookups of settings a reload replaced, so the metric never goes back. */
  private retired: CacheLookups = { hits: 0, misses: 0 }
  /** Called after each reload that took effect (what reads the config only once re-reads it). */
  onReloaded: () => void = () => {}

  private constructor(
    public config: Config,
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
    return new LiveConfig(config, { current }, nativeRelay, logger, options.configFile)
  }

  cacheLookups(): CacheLookups {
    const live = cacheLookups(this.settings.current)
    return { hits: this.retired.hits + live.hits, misses: this.retired.misses + live.misses }
  }

  /**
   * Re-reads the config file and puts it in force for `sessions` and those to come. An invalid
   * file is refused (logged, and thrown) and the running config stays; keys read only at start
   * keep their value and are logged.
   */
  async reload(sessions: Iterable<RegisteredSession>): Promise<void> {
    if (!this.configFile) throw new Error('pgfence was started without a config file')
    let loaded: Config
    try {
      loaded = loadConfigFile(this.configFile)
    } catch (err) {
      this.logger.error(
        { reason: (err as Error).message },
        'configuration reload refused: the running configuration stays in force',
      )
      throw err
    }
    const restart = keysNeedingRestart(this.config, loaded)
    if (restart.length > 0)
      this.logger.warn({ keys: restart }, 'configuration reload: these keys need a restart')
    const next = reloadableConfig(this.config, loaded)
    this.replace(next, await sessionSettings(next, this.nativeRelay, this.logger))
    for (const session of sessions) session.reconfigure()
    this.onReloaded()
    this.logger.info(
      { fencedTables: next.fencing.tables.length, fencedResources: next.fencing.resources.length },
      'configuration reloaded',
    )
  }

  private replace(config: Config, settings: SessionSettings): void {
    this.retired = this.cacheLookups()
    this.settings.current = settings
    this.config = config
    this.logger.level = config.log.level
  }
}
