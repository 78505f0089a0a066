import http from 'node:http'
import { once } from 'node:events'
import type { AddressInfo } from 'node:net'
import type { Logger } from '../log.js'
import type { ProxyMetrics } from './metrics.js'

export interface Probes {
  /** The proxy is listening and not draining. */
  serving(): boolean
  /** The upstream accepts a connection (within upstream.connectTimeoutMs). */
  upstreamReachable(): Promise<boolean>
}

export interface AdminHttpServer {
  port: number
  close(): Promise<void>
}

/** `/metrics` (Prometheus text format), `/healthz` and `/readyz` on admin.listen. */
export async function startAdminHttp(
  listen: { host: string; port: number },
  metrics: ProxyMetrics,
  probes: Probes,
  logger: Logger,
): Promise<AdminHttpServer> {
  const server = http.createServer((request, response) => {
    void answer(request.url ?? '/', metrics, probes).then(
      ({ status, type, body }) => response.writeHead(status, { 'Content-Type': type }).end(body),
      (err: Error) => {
        logger.error({ err }, 'admin endpoint failed')
        response.writeHead(500).end()
      },
    )
  })
  server.listen(listen.port, listen.host)
  await once(server, 'listening')
  const { port } = server.address() as AddressInfo
  logger.info({ host: listen.host, port }, 'admin endpoint listening')
  return {
    port,
    close: async () => {
      server.closeAllConnections()
      await new Promise((resolve) => server.close(resolve))
    },
  }
}

interface Answer {
  status: number
  type: string
  body: string
}

const text = (status: number, body: string): Answer => ({
  status,
  type: 'text/plain; charset=utf-8',
  body: `${body}\n`,
})

async function answer(url: string, metrics: ProxyMetrics, probes: Probes): Promise<Answer> {
  switch (new URL(url, 'http://admin').pathname) {
    case '/metrics':
      return {
        status: 200,
        type: metrics.registry.contentType,
        body: await metrics.registry.metrics(),
      }
    case '/healthz':
      return text(200, 'ok')
    case '/readyz':
      if (!probes.serving()) return text(503, 'not serving: draining or not listening')
      if (!(await probes.upstreamReachable())) return text(503, 'upstream unreachable')
      return text(200, 'ready')
    default:
      return text(404, 'not found: /metrics, /healthz, /readyz')
  }
}
