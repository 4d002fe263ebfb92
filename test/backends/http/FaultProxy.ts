/**
 * A loopback HTTP proxy that disturbs a share of the requests it forwards: it
 * answers 408, 429 (with Retry-After), 503, drops the connection before or after
 * forwarding, or forwards slowly. Seeded, so a run is reproducible.
 *
 * Kinds from the official SDK's fault model, each counted in `injected`:
 * - `400-bare`: a 400 with an HTML page, as a proxy or load balancer answers (never
 *   forwarded);
 * - `402`: billing paused (never forwarded);
 * - `408-queue`: a poll answered 408 with a `try_again` body carrying `queue_state`;
 * - `409-save`: a save is forwarded (the server saves) and its answer lost; its retry
 *   (same idempotency key) is forwarded too and answered 409, as a lock held by the
 *   first would be;
 * - `410`: a poll answered 410, an expired promise (never forwarded);
 * - `503-archive`: the archive route answered 503 with Retry-After, an archive still
 *   being built (never forwarded).
 * A kind drawn for a request it does not apply to (a 410 for a submission) is owed to
 * the next request it applies to.
 */
import { Effect } from "effect"
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import { random } from "../../../src/vocabulary/Env.ts"

export type Fault = "408" | "429" | "503" | "drop-before" | "drop-after" | "slow" | "400-bare" | "402" | "408-queue" | "409-save" | "410" | "503-archive"

/** The kinds of the first fault model: no answer, or an answer every client retries. */
export const BASIC_FAULTS: ReadonlyArray<Fault> = ["408", "429", "503", "drop-before", "drop-after", "slow"]

/** The statuses of the SDK's fault model on top of the basic kinds. */
export const SDK_FAULTS: ReadonlyArray<Fault> = ["400-bare", "402", "408-queue", "409-save", "410", "503-archive"]

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
  /** requests seen, and those whose body was protobuf */
  readonly requests: { count: number; protobuf: number }
}

/** A seeded uniform [0, 1) stream (the env's PRNG). */
const seededUniform = (seed: number) => random(`seed/${seed}`).next

/** An nginx-style error page: not JSON, so no Tinker server sent it. */
export const PROXY_PAGE = "<html>\r\n<head><title>400 Bad Request</title></head>\r\n<body>\r\n<center><h1>400 Bad Request</h1></center>\r\n<hr><center>proxy</center>\r\n</body>\r\n</html>\r\n"

/** What the proxy sees of a request. */
interface Seen {
  readonly method: string
  readonly url: string
  readonly key: string | undefined
  readonly isPoll: boolean
}

const isSave = (s: Seen) => s.method === "POST" && /\/(save_weights|save_weights_for_sampler)$/.test(s.url)

/** Whether an SDK kind can be injected on this request. */
const applies = (kind: Fault, s: Seen): boolean => {
  switch (kind) {
    case "408-queue":
    case "410":
      return s.isPoll
    case "409-save":
      return isSave(s) && s.key !== undefined
    case "503-archive":
      return s.method === "GET" && s.url.split("?")[0]!.endsWith("/archive")
    default:
      return true
  }
}

/** The headers an answer keeps on its way back. */
const KEPT = ["content-type", "retry-after", "location", "expires", "content-disposition"] as const

const json = (value: unknown) => Buffer.from(JSON.stringify(value))

/** The answer of a fault that is never forwarded. */
const cannedAnswer = (fault: Fault): { status: number; headers: http.IncomingHttpHeaders; body: Buffer } | undefined => {
  switch (fault) {
    case "408":
      return { status: 408, headers: {}, body: json({ detail: "proxy: request timeout" }) }
    case "429":
      return { status: 429, headers: { "retry-after": "1" }, body: json({ detail: "proxy: too many requests" }) }
    case "503":
      return { status: 503, headers: {}, body: json({ detail: "proxy: unavailable" }) }
    case "400-bare":
      return { status: 400, headers: { "content-type": "text/html" }, body: Buffer.from(PROXY_PAGE) }
    case "402":
      return { status: 402, headers: {}, body: json({ detail: "proxy: the job is paused for billing" }) }
    case "408-queue":
      return { status: 408, headers: {}, body: json({ type: "try_again", queue_state: "paused_capacity", queue_state_reason: "proxy: short on capacity" }) }
    case "410":
      return { status: 410, headers: {}, body: json({ detail: "proxy: promise expired" }) }
    case "503-archive":
      return { status: 503, headers: { "retry-after": "1" }, body: json({ detail: "proxy: the archive is being built" }) }
    default:
      return undefined
  }
}

/** Picks each request's fault: owed ones first, then a seeded draw. */
const makeChooser = (options: ProxyOptions, kinds: ReadonlyArray<Fault>) => {
  const rand = seededUniform(options.seed)
  let next = 0
  let owedDropAfter = false
  const owed = new Set<Fault>()
  /** idempotency keys of saves whose answer was lost: their retry gets 409 */
  const conflictOn = new Set<string>()
  return (s: Seen): Fault | "409-retry" | "409-first" | undefined => {
    if (s.key !== undefined && conflictOn.delete(s.key)) return "409-retry"
    if (owedDropAfter && !s.isPoll && s.method === "POST") {
      owedDropAfter = false
      return "drop-after"
    }
    for (const kind of owed) {
      if (!applies(kind, s)) continue
      owed.delete(kind)
      if (kind !== "409-save") return kind
      conflictOn.add(s.key!)
      return "409-first"
    }
    if (!(rand() < options.rate)) return undefined
    const fault = kinds[next++ % kinds.length]!
    if (fault === "drop-after" && (s.isPoll || s.method !== "POST")) {
      // save it for a submission, where a lost answer matters most
      owedDropAfter = true
      return "drop-before"
    }
    if (!applies(fault, s)) {
      owed.add(fault)
      return undefined
    }
    if (fault !== "409-save") return fault
    conflictOn.add(s.key!)
    return "409-first"
  }
}

export const faultProxy = (options: ProxyOptions) =>
  Effect.acquireRelease(
    Effect.promise(
      () =>
        new Promise<{ proxy: Proxy; server: http.Server; agent: http.Agent }>((resolve) => {
          const kinds = options.kinds ?? BASIC_FAULTS
          const injected = Object.fromEntries(kinds.map((k) => [k, 0])) as Record<Fault, number>
          const requests = { count: 0, protobuf: 0 }
          const choose = makeChooser(options, kinds)
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
              if ((req.headers["content-type"] ?? "").startsWith("application/x-protobuf")) requests.protobuf++
              const body = Buffer.concat(chunks)
              const key = req.headers["x-idempotency-key"]
              const seen: Seen = { method: req.method ?? "GET", url: req.url ?? "", key: typeof key === "string" ? key : undefined, isPoll: (req.url ?? "").endsWith("/retrieve_future") }
              const fault = choose(seen)
              const counted: Fault | undefined = fault === "409-retry" ? "409-save" : fault === "409-first" ? undefined : fault
              if (counted !== undefined) injected[counted] = (injected[counted] ?? 0) + 1
              const reply = (status: number, headers: http.IncomingHttpHeaders, data: Buffer) => {
                const h: http.OutgoingHttpHeaders = { "content-type": headers["content-type"] ?? "application/json" }
                for (const name of KEPT) if (name !== "content-type" && headers[name] !== undefined) h[name] = headers[name]
                res.writeHead(status, h)
                res.end(data)
              }
              const canned = fault === undefined || fault === "409-retry" || fault === "409-first" ? undefined : cannedAnswer(fault)
              if (canned !== undefined) return reply(canned.status, canned.headers, canned.body)
              switch (fault) {
                case "drop-before":
                  return req.socket.destroy()
                case "drop-after":
                case "409-first":
                  return forward(req, body, () => req.socket.destroy())
                case "409-retry":
                  return forward(req, body, () => reply(409, {}, json({ detail: "proxy: a request with this idempotency key is in progress" })))
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
