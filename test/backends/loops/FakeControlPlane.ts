/**
 * A fake of the documented Loops control plane on loopback, for tests. It is strict: a
 * request without `Authorization: Bearer <key>` (or `Api-Key <key>`) is a 401; an
 * unknown or missing body field or query parameter, or one of the wrong type, is a 400
 * naming it (`FakeStrict.ts`). Its answers carry every field the API reference marks
 * required (`FakeRoutes.ts`).
 *
 * It also stands in front of the data plane: a run's `base_url` is
 * `<fake>/dp/<run_id>/trainer` and its sampler's `<fake>/dp/<run_id>/sampler`, both
 * forwarded to `dataPlane` (a gyre `serve`) while the run is ACTIVE and answered 404
 * after it is deactivated, so the log shows every request a client made, in the order
 * they arrived. Checkpoint files are served at `<fake>/files/<token>` without
 * authentication, as presigned URLs are.
 */
import * as Http from "node:http"
import type { AddressInfo } from "node:net"
import { control, type FakeCheckpoint, type FakeRun, type State, uriOf } from "./FakeRoutes.ts"

export type { FakeRun } from "./FakeRoutes.ts"

export interface Entry {
  readonly method: string
  /** the path with its query */
  readonly path: string
  /** control: `/v1/loops/*`; trainer / sampler: the data plane; files: presigned downloads */
  readonly kind: "control" | "trainer" | "sampler" | "files" | "other"
  readonly runId?: string | undefined
  /** the answer's status (0 while the answer is pending or when the connection was dropped) */
  status: number
  /** whether the request carried an Authorization header */
  readonly authorized: boolean
  /** every header value, to check that no secret leaks where it should not go */
  readonly headers: string
}

export type Fault = (request: { readonly method: string; readonly path: string; readonly kind: Entry["kind"]; readonly n: number }) =>
  /** this answer instead of the normal one; with `handled`, the request is handled first (a create makes its run, then answers this) */
  | { readonly status: number; readonly body?: unknown; readonly headers?: Record<string, string>; readonly handled?: boolean }
  /** the connection is lost before the request is handled */
  | "drop"
  /** the request is handled, then the connection is lost before the answer */
  | "drop-after"
  | undefined

export interface FakeOptions {
  readonly apiKey: string
  /** the data plane the trainer and sampler URLs forward to */
  readonly dataPlane?: string | undefined
  /** the models of `GET /v1/loops/capabilities` */
  readonly models?: ReadonlyArray<string> | undefined
  /** their `max_context_length` (default 8192) */
  readonly contextLength?: number | undefined
  /** status polls of a run before it is ready (default 1) */
  readonly readyAfterPolls?: number | undefined
  /** runs never become ready */
  readonly neverReady?: boolean | undefined
  /** answers to inject instead of the normal ones */
  readonly fault?: Fault | undefined
  /** the files route's default page size (the API's is 1000) */
  readonly filesPageSize?: number | undefined
  /** rewrites every run's JSON (status, URLs) before it is sent; `ready` is whether the run would be ready */
  readonly shapeRun?: State["shapeRun"] | undefined
  /** rewrites the answer to a create (the run exists all the same) */
  readonly shapeCreated?: State["shapeCreated"] | undefined
}

const readBody = (req: Http.IncomingMessage) =>
  new Promise<Buffer>((resolve, reject) => {
    const chunks: Array<Buffer> = []
    req.on("data", (c: Buffer) => chunks.push(c))
    req.on("end", () => resolve(Buffer.concat(chunks)))
    req.on("error", reject)
  })

/** Forwards a data-plane request to `target` and writes its answer back; returns the status. */
const forward = async (target: string, req: Http.IncomingMessage, res: Http.ServerResponse, body: Buffer) => {
  const headers: Record<string, string> = {}
  for (const [k, v] of Object.entries(req.headers)) if (typeof v === "string" && k !== "host" && k !== "content-length") headers[k] = v
  const init: RequestInit = { method: req.method ?? "GET", headers }
  if (body.length > 0) init.body = new Uint8Array(body)
  const answer = await fetch(target, init)
  const bytes = Buffer.from(await answer.arrayBuffer())
  res.writeHead(answer.status, { "content-type": answer.headers.get("content-type") ?? "application/json" })
  res.end(bytes)
  return answer.status
}

const send = (res: Http.ServerResponse, status: number, json: unknown, headers: Record<string, string> = {}) => {
  res.writeHead(status, { "content-type": "application/json", ...headers })
  res.end(JSON.stringify(json))
}

export const startFake = async (options: FakeOptions) => {
  const log: Array<Entry> = []
  const counts = new Map<string, number>()
  let ids = 0
  const state: State = {
    url: "",
    runs: new Map(),
    sessions: new Set(),
    checkpoints: [],
    files: new Map(),
    models: options.models ?? ["Qwen/Qwen3-8B"],
    contextLength: options.contextLength ?? 8192,
    readyAfterPolls: options.readyAfterPolls ?? 1,
    neverReady: options.neverReady ?? false,
    filesPageSize: options.filesPageSize ?? 1000,
    newId: (prefix) => `${prefix}${(++ids).toString(36).padStart(5, "0")}`,
    shapeRun: options.shapeRun ?? ((json) => json),
    shapeCreated: options.shapeCreated ?? ((json) => json),
  }

  const handle = async (req: Http.IncomingMessage, res: Http.ServerResponse) => {
    const u = new URL(req.url ?? "/", "http://x")
    const method = req.method ?? "GET"
    const body = await readBody(req)
    const auth = req.headers["authorization"]
    const dp = /^\/dp\/([^/]+)\/(trainer|sampler)(\/.*)$/.exec(u.pathname)
    const kind: Entry["kind"] = u.pathname.startsWith("/v1/") ? "control" : dp !== null ? (dp[2] as "trainer" | "sampler") : u.pathname.startsWith("/files/") ? "files" : "other"
    const key = `${kind} ${method} ${u.pathname}`
    const n = (counts.get(key) ?? 0) + 1
    counts.set(key, n)
    const record = (status: number, runId?: string) => {
      const entry: Entry = { method, path: `${u.pathname}${u.search}`, kind, runId, status, authorized: auth !== undefined, headers: Object.values(req.headers).join("\n") }
      log.push(entry)
      return entry
    }
    const injected = options.fault?.({ method, path: u.pathname, kind, n })
    if (injected === "drop") return record(0, dp?.[1]), req.socket.destroy()
    const replaced = injected !== undefined && injected !== "drop-after" && injected.handled === true ? injected : undefined
    if (injected !== undefined && injected !== "drop-after" && replaced === undefined) return record(injected.status, dp?.[1]), send(res, injected.status, injected.body ?? { detail: "injected" }, injected.headers)
    if (kind === "files") {
      const bytes = state.files.get(u.pathname.slice("/files/".length))
      record(bytes === undefined ? 404 : 200)
      if (bytes === undefined) return send(res, 404, { detail: "no such file" })
      res.writeHead(200, { "content-type": "application/octet-stream" })
      return res.end(bytes)
    }
    if (dp !== null) {
      const run = state.runs.get(dp[1]!)
      if (run === undefined || !run.active || options.dataPlane === undefined) return record(404, dp[1]), send(res, 404, { detail: `run ${dp[1]} is not active` })
      // logged when it arrives, so the log's order is the order requests reached the run
      const entry = record(0, dp[1])
      entry.status = await forward(`${options.dataPlane}${dp[3]}${u.search}`, req, res, body)
      return
    }
    if (kind !== "control") return record(404), send(res, 404, { detail: "not found" })
    if (auth !== `Bearer ${options.apiKey}` && auth !== `Api-Key ${options.apiKey}`) return record(401), send(res, 401, { detail: "Invalid or missing API key" })
    let json: unknown = undefined
    if (body.length > 0) {
      try {
        json = JSON.parse(body.toString("utf8"))
      } catch {
        return record(400), send(res, 400, { detail: "body is not JSON" })
      }
    }
    const reply = control(state, method, u.pathname, u.searchParams, json)
    const runId = /\/runs\/([^/?]+)/.exec(u.pathname)?.[1]
    record(injected === "drop-after" ? 0 : (replaced?.status ?? reply.status), runId)
    if (injected === "drop-after") return req.socket.destroy()
    if (replaced !== undefined) return send(res, replaced.status, replaced.body ?? { detail: "injected" }, replaced.headers)
    send(res, reply.status, reply.body)
  }

  const server = Http.createServer((req, res) => {
    handle(req, res).catch((e) => {
      if (!res.headersSent) res.writeHead(502, { "content-type": "application/json" })
      res.end(JSON.stringify({ detail: `fake: ${String(e)}` }))
    })
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  state.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`

  return {
    url: state.url,
    log,
    runs: state.runs,
    /** the runs not deactivated */
    activeRuns: () => [...state.runs.values()].filter((r) => r.active).map((r) => r.id),
    /** deactivations of a run */
    deactivations: (runId: string) => state.runs.get(runId)?.deactivations ?? 0,
    /** the log entries of a run (control plane and data plane) */
    entriesOf: (runId: string) => log.filter((e) => e.runId === runId),
    /** adds a checkpoint with its files to a run */
    addCheckpoint: (c: Omit<FakeCheckpoint, "id">) => {
      const full = { ...c, id: state.newId("ck") }
      state.checkpoints.push(full)
      return { id: full.id, uri: uriOf(full) }
    },
    /** adds a run directly, e.g. one left up by an earlier process */
    addRun: (runId: string, baseModel: string, active = true) => {
      const r: FakeRun = { id: runId, sessionId: state.newId("ses"), baseModel, name: baseModel, createdAt: new Date().toISOString(), active, polls: 1, loraRank: 64, deactivations: 0 }
      state.runs.set(runId, r)
      return r
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      }),
  }
}

export type Fake = Awaited<ReturnType<typeof startFake>>
