/** `host:port` or `[v6addr]:port`, as libpq lists hosts; the port defaults to 5432. */
export const HOST_PORT = /^(?:\[([0-9A-Fa-f:.]+)\]|([^\s:[\]]+))(?::(\d{1,5}))?$/

export interface HostPort {
  host: string
  port: number
}

/** The host and port of a `host:port` that matches HOST_PORT. */
export function parseHostPort(text: string): HostPort {
  const [, v6, name, port] = HOST_PORT.exec(text) ?? []
  return { host: v6 ?? name ?? text, port: port ? Number(port) : 5432 }
}
