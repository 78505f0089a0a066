/** pgfence as a library: run the proxy in-process, load config, install the fence schema. */
export { startProxy, type ProxyOptions, type RunningProxy } from './proxy/proxy-server.js'
export { loadConfigFile, parseConfig, defaultConfig, ConfigError } from './config/load.js'
export type { Config, FencingConfig, FencedTableConfig } from './config/schema.js'
export { installSql } from './schema/install.js'
export { createLogger } from './log.js'
