/**
 * A fake of the documented Loops control plane on loopback, for tests. It is strict: a
 * request without `Authorization: Bearer <key>` (or `Api-Key <key>`) is a 401; an
 * unknown or missing body field or query parameter, or one of the wrong type, is a 400
 * naming it. Its answers carry every field the API reference marks required.
 *
 * It also stands in front of the data plane: a run's `base_url` is
 * `<fake>/dp/<run_id>/trainer` and its sampler's `<fake>/dp/<run_id>/sampler`, both
 * forwarded to `dataPlane` (a gyre `serve`) while the run is ACTIVE and answered 404
 * after it is deactivated, so the log shows every request a client made and when.
 * Checkpoint files are served at `<fake>/files/<token>` without authentication, as
 * presigned URLs are.
 */
import * as Http from "node:http"
import type { AddressInfo } from "node:net"

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
  | { readonly status: number; readonly body?: unknown; readonly headers?: Record<string, string> }
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
  /** status polls of a run before it is ready (default 1) */
  readonly readyAfterPolls?: number | undefined
  /** runs never become ready */
  readonly neverReady?: boolean | undefined
  /** answers to inject instead of the normal ones */
  readonly fault?: Fault | undefined
  /** the files route's default page size (the API's is 1000) */
  readonly filesPageSize?: number | undefined
}

interface FakeRun {
  id: string
  sessionId: string
  baseModel: string
  name: string
  createdAt: string
  active: boolean
  polls: number
  loraRank: number
  deactivations: number
}

interface FakeCheckpoint {
  readonly id: string
  readonly runId: string
  readonly name: string
  readonly target: "trainer" | "sampler"
  readonly files: ReadonlyArray<{ readonly name: string; readonly bytes: Uint8Array; readonly nodeRank?: number }>
}

const RUN_FIELDS: Record<string, "string" | "int" | "availability"> = {
  session_id: "string",
  base_model: "string",
  name: "string",
  max_seq_len: "int",
  lora_rank: "int",
  seed: "int",
  scale_down_delay_seconds: "int",
  availability_model: "availability",
  replicas: "int",
  path: "string",
  reuse_from_run_id: "string",
  reuse_from_session_id: "string",
}

class Reply {
  constructor(readonly status: number, readonly body: unknown) {}
}
const bad = (message: string) => new Reply(400, { detail: message })
const notFound = (message: string) => new Reply(404, { detail: message })

const checkQuery = (query: URLSearchParams, allowed: ReadonlyArray<string>) => {
  for (const k of query.keys()) if (!allowed.includes(k)) return bad(`unknown query parameter '${k}'`)
  return undefined
}

const checkEmptyBody = (body: unknown) => {
  if (body === undefined) return undefined
  if (typeof body !== "object" || body === null || Array.isArray(body)) return bad("this route takes no body")
  const k = Object.keys(body)[0]
  return k === undefined ? undefined : bad(`unknown field '${k}'`)
}

const checkRunBody = (body: unknown): Reply | undefined => {
  if (typeof body !== "object" || body === null || Array.isArray(body)) return bad("body must be a JSON object")
  const b = body as Record<string, unknown>
  for (const [k, v] of Object.entries(b)) {
    const type = RUN_FIELDS[k]
    if (type === undefined) return bad(`unknown field '${k}'`)
    if (v === null) continue
    if (type === "string" && typeof v !== "string") return bad(`field '${k}' must be a string`)
    if (type === "int" && !Number.isInteger(v)) return bad(`field '${k}' must be an integer`)
    if (type === "availability" && v !== "dedicated" && v !== "spot") return bad(`field '${k}' must be 'dedicated' or 'spot'`)
  }
  for (const k of ["session_id", "base_model"]) if (typeof b[k] !== "string") return bad(`missing field '${k}'`)
  if (b["lora_rank"] !== undefined && (b["lora_rank"] as number) < 1) return bad("field 'lora_rank' must be >= 1")
  return undefined
}

export const startFake = async (options: FakeOptions) => {
  const log: Array<Entry> = []
  const runs = new Map<string, FakeRun>()
  const sessions = new Set<string>()
  const checkpoints: Array<FakeCheckpoint> = []
  const files = new Map<string, Uint8Array>()
  const counts = new Map<string, number>()
  const models = options.models ?? ["Qwen/Qwen3-8B"]
  let ids = 0
  const newId = (prefix: string) => `${prefix}${(++ids).toString(36).padStart(5, "0")}`
  let url = ""
  const user = { email: "user@example.com" }

  const samplerOf = (r: FakeRun) => {
    const ready = !options.neverReady && r.polls >= (options.readyAfterPolls ?? 1)
    const name = !r.active ? "INACTIVE" : ready ? "ACTIVE" : r.polls === 0 ? "BUILDING" : "LOADING_MODEL"
    return {
      id: `s-${r.id}`,
      base_url: `${url}/dp/${r.id}/sampler`,
      base_model: r.baseModel,
      created_at: r.createdAt,
      model_id: `m-${r.id}`,
      deployment_id: `md-${r.id}`,
      status: { name },
      user,
      instance_type: null,
      node_count: 1,
    }
  }
  const trainerStatus = (r: FakeRun) => (!r.active ? "STOPPED" : !options.neverReady && r.polls >= (options.readyAfterPolls ?? 1) ? "RUNNING" : r.polls === 0 ? "CREATED" : "DEPLOYING")
  const runJson = (r: FakeRun) => ({
    id: r.id,
    session_id: r.sessionId,
    deployment_id: `d-${r.id}`,
    name: r.name,
    base_model: r.baseModel,
    base_url: `${url}/dp/${r.id}/trainer`,
    created_at: r.createdAt,
    status: { name: r.active ? "ACTIVE" : "INACTIVE" },
    user,
    sampler: samplerOf(r),
  })
  const checkpointJson = (c: FakeCheckpoint) => ({
    checkpoint_id: c.name,
    created_at: "2026-11-29T12:00:00Z",
    checkpoint_type: "lora",
    base_model: runs.get(c.runId)?.baseModel ?? null,
    lora_adapter_config: { r: runs.get(c.runId)?.loraRank ?? 16 },
    size_bytes: c.files.reduce((a, f) => a + f.bytes.length, 0),
    sync_status: "COMPLETE",
    id: c.id,
    run_id: c.runId,
    target: c.target,
  })
  const uriOf = (c: FakeCheckpoint) => `bt://loops:${c.runId}/${c.target === "trainer" ? "weights" : "sampler_weights"}/${c.name}`

  const control = (method: string, path: string, query: URLSearchParams, body: unknown): Reply => {
    const seg = path.split("/").slice(1) // v1, loops, ...
    const route = `${method} /${seg.slice(0, 3).join("/")}`
    if (method === "GET" && path === "/v1/loops/capabilities") {
      return checkQuery(query, []) ?? new Reply(200, { supported_models: models.map((m) => ({ model_name: m, max_context_length: 8192, supports_vision_language: false })) })
    }
    if (method === "POST" && path === "/v1/loops/sessions") {
      const problem = checkQuery(query, []) ?? checkEmptyBody(body)
      if (problem) return problem
      const id = newId("ses")
      sessions.add(id)
      return new Reply(200, { session: { id } })
    }
    if (method === "GET" && seg[2] === "sessions" && seg.length === 4) {
      return sessions.has(seg[3]!) ? new Reply(200, { session: { id: seg[3] } }) : notFound(`no session ${seg[3]}`)
    }
    if (method === "POST" && path === "/v1/loops/runs") {
      const problem = checkQuery(query, []) ?? checkRunBody(body)
      if (problem) return problem
      const b = body as Record<string, unknown>
      if (!sessions.has(b["session_id"] as string)) return notFound(`no session ${String(b["session_id"])}`)
      if (!models.includes(b["base_model"] as string)) return bad(`base_model '${String(b["base_model"])}' is not supported`)
      const r: FakeRun = {
        id: newId("run"),
        sessionId: b["session_id"] as string,
        baseModel: b["base_model"] as string,
        name: (b["name"] as string | undefined) ?? (b["base_model"] as string),
        createdAt: new Date().toISOString(),
        active: true,
        polls: 0,
        loraRank: (b["lora_rank"] as number | undefined) ?? 64,
        deactivations: 0,
      }
      runs.set(r.id, r)
      return new Reply(200, { run: runJson(r) })
    }
    if (method === "GET" && path === "/v1/loops/runs") {
      const problem = checkQuery(query, ["run_id", "base_model", "scope"])
      if (problem) return problem
      const list = [...runs.values()].filter((r) => (!query.has("run_id") || r.id === query.get("run_id")) && (!query.has("base_model") || r.baseModel === query.get("base_model")))
      return new Reply(200, { runs: list.reverse().map(runJson) })
    }
    if (seg[2] === "runs" && seg.length >= 4) {
      const r = runs.get(seg[3]!)
      if (r === undefined) return notFound(`no run ${seg[3]}`)
      if (method === "GET" && seg.length === 4) {
        const problem = checkQuery(query, [])
        if (problem) return problem
        r.polls++
        return new Reply(200, { run: runJson(r) })
      }
      if (method === "POST" && seg[4] === "deactivate" && seg.length === 5) {
        const problem = checkQuery(query, []) ?? checkEmptyBody(body)
        if (problem) return problem
        r.active = false
        r.deactivations++
        return new Reply(200, { id: r.id, base_model: r.baseModel, user })
      }
    }
    if (method === "GET" && seg[2] === "deployments" && seg.length === 4) {
      const r = runs.get(seg[3]!.replace(/^d-/, ""))
      if (r === undefined) return notFound(`no deployment ${seg[3]}`)
      return new Reply(200, {
        deployment: {
          id: seg[3],
          active_run_id: r.active ? r.id : null,
          latest_run_id: r.id,
          base_model: r.baseModel,
          base_url: `${url}/dp/${r.id}/trainer`,
          status: { name: trainerStatus(r) },
          user,
          created_at: r.createdAt,
          availability_model: "dedicated",
          instance_type: { id: "H100", name: "H100", memory_limit_mib: 1, millicpu_limit: 1, gpu_count: 1, gpu_type: "H100", gpu_memory_limit_mib: 1 },
          node_count: 1,
          sampler: samplerOf(r),
        },
      })
    }
    if (method === "GET" && path === "/v1/loops/checkpoints") {
      const problem = checkQuery(query, ["run_id", "base_model", "checkpoint_path"])
      if (problem) return problem
      const given = ["run_id", "base_model", "checkpoint_path"].filter((k) => query.has(k))
      if (given.length !== 1) return bad(`provide exactly one of run_id, base_model, checkpoint_path (got ${given.length === 0 ? "none" : given.join(", ")})`)
      const list = checkpoints.filter((c) =>
        query.has("run_id") ? c.runId === query.get("run_id") : query.has("base_model") ? runs.get(c.runId)?.baseModel === query.get("base_model") : uriOf(c) === query.get("checkpoint_path")
      )
      return new Reply(200, { checkpoints: list.map(checkpointJson) })
    }
    if (method === "GET" && seg[2] === "checkpoints" && seg[4] === "files" && seg.length === 5) {
      const problem = checkQuery(query, ["page_size", "page_token"])
      if (problem) return problem
      const c = checkpoints.find((x) => x.id === seg[3])
      if (c === undefined) return notFound(`no checkpoint ${seg[3]}`)
      const size = Number(query.get("page_size") ?? options.filesPageSize ?? 1000)
      const token = Number(query.get("page_token") ?? 0)
      if (!Number.isInteger(size) || size < 1) return bad("page_size must be an integer >= 1")
      if (!Number.isInteger(token) || token < 0) return bad("page_token must be an integer >= 0")
      const page = c.files.slice(token, token + size).map((f) => {
        const t = `${c.id}-${Math.random().toString(36).slice(2)}`
        files.set(t, f.bytes)
        return { url: `${url}/files/${t}`, relative_file_name: f.name, node_rank: f.nodeRank ?? 0, size_bytes: f.bytes.length, last_modified: "2026-11-29T12:00:00Z" }
      })
      return new Reply(200, { presigned_urls: page, next_page_token: token + size < c.files.length ? token + size : null, total_count: c.files.length })
    }
    return notFound(`no route ${route}`)
  }

  const readBody = (req: Http.IncomingMessage) =>
    new Promise<Buffer>((resolve, reject) => {
      const chunks: Array<Buffer> = []
      req.on("data", (c: Buffer) => chunks.push(c))
      req.on("end", () => resolve(Buffer.concat(chunks)))
      req.on("error", reject)
    })

  const forward = async (req: Http.IncomingMessage, res: Http.ServerResponse, rest: string, body: Buffer) => {
    const headers: Record<string, string> = {}
    for (const [k, v] of Object.entries(req.headers)) if (typeof v === "string" && k !== "host" && k !== "content-length") headers[k] = v
    const init: RequestInit = { method: req.method ?? "GET", headers }
    if (body.length > 0) init.body = new Uint8Array(body)
    const answer = await fetch(`${options.dataPlane}${rest}`, init)
    const bytes = Buffer.from(await answer.arrayBuffer())
    res.writeHead(answer.status, { "content-type": answer.headers.get("content-type") ?? "application/json" })
    res.end(bytes)
    return answer.status
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
    const record = (status: number, runId?: string) =>
      log.push({ method, path: `${u.pathname}${u.search}`, kind, runId, status, authorized: auth !== undefined, headers: Object.values(req.headers).join("\n") })
    const send = (status: number, json: unknown, headers: Record<string, string> = {}) => {
      res.writeHead(status, { "content-type": "application/json", ...headers })
      res.end(JSON.stringify(json))
    }
    const injected = options.fault?.({ method, path: u.pathname, kind, n })
    if (injected === "drop") {
      record(0)
      return req.socket.destroy()
    }
    if (injected !== undefined && injected !== "drop-after") {
      record(injected.status)
      return send(injected.status, injected.body ?? { detail: "injected" }, injected.headers)
    }
    if (kind === "files") {
      const bytes = files.get(u.pathname.slice("/files/".length))
      record(bytes === undefined ? 404 : 200)
      if (bytes === undefined) return send(404, { detail: "no such file" })
      res.writeHead(200, { "content-type": "application/octet-stream" })
      return res.end(bytes)
    }
    if (dp !== null) {
      const run = runs.get(dp[1]!)
      if (run === undefined || !run.active || options.dataPlane === undefined) {
        record(404, dp[1])
        return send(404, { detail: `run ${dp[1]} is not active` })
      }
      // logged when it arrives, so the log's order is the order requests reached the run
      record(0, dp[1])
      const entry = log[log.length - 1]!
      entry.status = await forward(req, res, `${dp[3]}${u.search}`, body)
      return
    }
    if (kind !== "control") {
      record(404)
      return send(404, { detail: "not found" })
    }
    if (auth !== `Bearer ${options.apiKey}` && auth !== `Api-Key ${options.apiKey}`) {
      record(401)
      return send(401, { detail: "Invalid or missing API key" })
    }
    let json: unknown = undefined
    if (body.length > 0) {
      try {
        json = JSON.parse(body.toString("utf8"))
      } catch {
        record(400)
        return send(400, { detail: "body is not JSON" })
      }
    }
    const reply = control(method, u.pathname, u.searchParams, json)
    const runId = /\/runs\/([^/?]+)/.exec(u.pathname)?.[1]
    record(injected === "drop-after" ? 0 : reply.status, runId)
    if (injected === "drop-after") return req.socket.destroy()
    send(reply.status, reply.body)
  }

  const server = Http.createServer((req, res) => {
    handle(req, res).catch((e) => {
      if (!res.headersSent) res.writeHead(502, { "content-type": "application/json" })
      res.end(JSON.stringify({ detail: `fake: ${String(e)}` }))
    })
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`

  return {
    url,
    log,
    runs,
    /** deactivations of a run */
    deactivations: (runId: string) => runs.get(runId)?.deactivations ?? 0,
    /** the log entries of a run (control plane and data plane) */
    entriesOf: (runId: string) => log.filter((e) => e.runId === runId),
    /** adds a checkpoint with its files to a run */
    addCheckpoint: (c: Omit<FakeCheckpoint, "id">) => {
      const full = { ...c, id: newId("ck") }
      checkpoints.push(full)
      return { id: full.id, uri: uriOf(full) }
    },
    /** adds a run directly, e.g. one left up by an earlier process */
    addRun: (runId: string, baseModel: string, active = true) => {
      const r: FakeRun = { id: runId, sessionId: newId("ses"), baseModel, name: baseModel, createdAt: new Date().toISOString(), active, polls: 1, loraRank: 64, deactivations: 0 }
      runs.set(runId, r)
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
