/**
 * A loopback HTTP proxy that disturbs a share of the requests it forwards: it
 * answers 408, 429 (with Retry-After), 503, drops the connection before or after
 * forwarding, or forwards slowly. Seeded, so a run is reproducible.
 */
import { Effect } from "effect"
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import { random } from "../../../src/Env.ts"

export type Fault = "408" | "429" | "503" | "drop-before" | "drop-after" | "slow"

export interface ProxyOptions {
  readonly upstream: string
  /** share of requests disturbed */
  readonly rate: number
  readonly seed: number
  readonly kinds?: ReadonlyArray<Fault>
  /** delay of a slow answer, ms */
  readonly slowMs?: number
}

export interface Proxy {
  readonly url: string
  readonly injected: Record<Fault, number>
  readonly requests: { count: number }
}

/** A seeded uniform [0, 1) stream (the env's PRNG). */
const seededUniform = (seed: number) => random(`seed/${seed}`).next

export const faultProxy = (options: ProxyOptions) =>
  Effect.acquireRelease(
    Effect.promise(
      () =>
        new Promise<{ proxy: Proxy; server: http.Server; agent: http.Agent }>((resolve) => {
          const rand = seededUniform(options.seed)
          const kinds = options.kinds ?? ["408", "429", "503", "drop-before", "drop-after", "slow"]
          const injected = Object.fromEntries(kinds.map((k) => [k, 0])) as Record<Fault, number>
          const requests = { count: 0 }
          let next = 0
          let owedDropAfter = false
          const upstream = new URL(options.upstream)
          const agent = new http.Agent({ keepAlive: true })

          const forward = (req: http.IncomingMessage, body: Buffer, onAnswer: (status: number, headers: http.IncomingHttpHeaders, data: Buffer) => void) => {
            const up = http.request(
              { host: upstream.hostname, port: upstream.port, method: req.method, path: req.url, headers: req.headers, agent },
              (res) => {
                const chunks: Array<Buffer> = []
                res.on("data", (c: Buffer) => chunks.push(c))
                res.on("end", () => onAnswer(res.statusCode ?? 502, res.headers, Buffer.concat(chunks)))
              },
            )
            up.on("error", () => onAnswer(502, {}, Buffer.from("{}")))
            up.end(body)
          }

          const server = http.createServer((req, res) => {
            const chunks: Array<Buffer> = []
            req.on("data", (c: Buffer) => chunks.push(c))
            req.on("end", () => {
              requests.count++
              const body = Buffer.concat(chunks)
              const isPoll = (req.url ?? "").endsWith("/retrieve_future")
              let fault: Fault | undefined = undefined
              if (owedDropAfter && !isPoll && req.method === "POST") {
                fault = "drop-after"
                owedDropAfter = false
              } else if (rand() < options.rate) {
                fault = kinds[next++ % kinds.length]!
                if (fault === "drop-after" && (isPoll || req.method !== "POST")) {
                  // save it for a submission, where a lost answer matters most
                  owedDropAfter = true
                  fault = "drop-before"
                }
              }
              if (fault !== undefined) injected[fault] = (injected[fault] ?? 0) + 1
              const reply = (status: number, headers: http.IncomingHttpHeaders, data: Buffer) => {
                const h: http.OutgoingHttpHeaders = { "content-type": headers["content-type"] ?? "application/json" }
                if (headers["retry-after"] !== undefined) h["retry-after"] = headers["retry-after"]
                res.writeHead(status, h)
                res.end(data)
              }
              switch (fault) {
                case "408":
                  return reply(408, {}, Buffer.from(JSON.stringify({ detail: "proxy: request timeout" })))
                case "429":
                  return reply(429, { "retry-after": "1" }, Buffer.from(JSON.stringify({ detail: "proxy: too many requests" })))
                case "503":
                  return reply(503, {}, Buffer.from(JSON.stringify({ detail: "proxy: unavailable" })))
                case "drop-before":
                  return req.socket.destroy()
                case "drop-after":
                  return forward(req, body, () => req.socket.destroy())
                case "slow":
                  return setTimeout(() => forward(req, body, reply), options.slowMs ?? 40)
                default:
                  return forward(req, body, reply)
              }
            })
          })
          server.listen(0, "127.0.0.1", () => {
            const port = (server.address() as AddressInfo).port
            resolve({ proxy: { url: `http://127.0.0.1:${port}`, injected, requests }, server, agent })
          })
        }),
    ),
    ({ server, agent }) =>
      Effect.promise(
        () =>
          new Promise<void>((resolve) => {
            agent.destroy()
            server.closeAllConnections()
            server.close(() => resolve())
          }),
      ),
  ).pipe(Effect.map(({ proxy }) => proxy))
