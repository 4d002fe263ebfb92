/**
 * The fake control plane's state and routes: what each documented `/v1/loops/*` route
 * answers, with every field the reference marks required. A run comes up over its
 * first status polls (trainer CREATED -> DEPLOYING -> RUNNING, sampler BUILDING ->
 * LOADING_MODEL -> ACTIVE) unless told never to. A session holds one live run: a second
 * create in it is a 409, as the service answers.
 */
import { bad, checkEmptyBody, checkOneFilter, checkQuery, checkRunBody, notFound, Reply } from "./FakeStrict.ts"

export interface FakeRun {
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

export interface FakeCheckpoint {
  readonly id: string
  readonly runId: string
  readonly name: string
  readonly target: "trainer" | "sampler"
  readonly files: ReadonlyArray<{ readonly name: string; readonly bytes: Uint8Array; readonly nodeRank?: number }>
}

export interface State {
  url: string
  readonly runs: Map<string, FakeRun>
  readonly sessions: Set<string>
  readonly checkpoints: Array<FakeCheckpoint>
  /** presigned download tokens -> bytes */
  readonly files: Map<string, Uint8Array>
  readonly models: ReadonlyArray<string>
  /** `max_context_length` of every model in the capabilities */
  readonly contextLength: number
  readonly readyAfterPolls: number
  readonly neverReady: boolean
  readonly filesPageSize: number
  readonly newId: (prefix: string) => string
  /** rewrites a run's JSON before it is sent (to answer as a live service might: another status, null URLs) */
  readonly shapeRun: (json: Record<string, unknown>, run: FakeRun, ready: boolean) => unknown
  /** rewrites the answer to `POST /v1/loops/runs` (after the run was created) */
  readonly shapeCreated: (json: { run: unknown }) => unknown
}

const user = { email: "user@example.com" }
const ready = (s: State, r: FakeRun) => !s.neverReady && r.polls >= s.readyAfterPolls

const samplerJson = (s: State, r: FakeRun) => ({
  id: `s-${r.id}`,
  base_url: `${s.url}/dp/${r.id}/sampler`,
  base_model: r.baseModel,
  created_at: r.createdAt,
  model_id: `m-${r.id}`,
  deployment_id: `md-${r.id}`,
  status: { name: !r.active ? "INACTIVE" : ready(s, r) ? "ACTIVE" : r.polls === 0 ? "BUILDING" : "LOADING_MODEL" },
  user,
  instance_type: null,
  node_count: 1,
})

const runJson = (s: State, r: FakeRun) => s.shapeRun(plainRunJson(s, r), r, r.active && ready(s, r))

const plainRunJson = (s: State, r: FakeRun): Record<string, unknown> => ({
  id: r.id,
  session_id: r.sessionId,
  deployment_id: `d-${r.id}`,
  name: r.name,
  base_model: r.baseModel,
  base_url: `${s.url}/dp/${r.id}/trainer`,
  created_at: r.createdAt,
  status: { name: r.active ? "ACTIVE" : "INACTIVE" },
  user,
  sampler: samplerJson(s, r),
})

const deploymentJson = (s: State, id: string, r: FakeRun) => ({
  id,
  active_run_id: r.active ? r.id : null,
  latest_run_id: r.id,
  base_model: r.baseModel,
  base_url: `${s.url}/dp/${r.id}/trainer`,
  status: { name: !r.active ? "STOPPED" : ready(s, r) ? "RUNNING" : r.polls === 0 ? "CREATED" : "DEPLOYING" },
  user,
  created_at: r.createdAt,
  availability_model: "dedicated",
  instance_type: { id: "H100", name: "H100", memory_limit_mib: 1, millicpu_limit: 1, gpu_count: 1, gpu_type: "H100", gpu_memory_limit_mib: 1 },
  node_count: 1,
  sampler: samplerJson(s, r),
})

export const uriOf = (c: FakeCheckpoint) => `bt://loops:${c.runId}/${c.target === "trainer" ? "weights" : "sampler_weights"}/${c.name}`

const checkpointJson = (s: State, c: FakeCheckpoint) => ({
  checkpoint_id: c.name,
  created_at: "2026-11-29T12:00:00Z",
  checkpoint_type: "lora",
  base_model: s.runs.get(c.runId)?.baseModel ?? null,
  lora_adapter_config: { r: s.runs.get(c.runId)?.loraRank ?? 16 },
  size_bytes: c.files.reduce((a, f) => a + f.bytes.length, 0),
  sync_status: "COMPLETE",
  id: c.id,
  run_id: c.runId,
  target: c.target,
})

const createRun = (s: State, body: unknown): Reply => {
  const problem = checkRunBody(body)
  if (problem) return problem
  const b = body as Record<string, unknown>
  if (!s.sessions.has(b["session_id"] as string)) return notFound(`no session ${String(b["session_id"])}`)
  if (!s.models.includes(b["base_model"] as string)) return bad(`base_model '${String(b["base_model"])}' is not supported`)
  const live = [...s.runs.values()].find((r) => r.active && r.sessionId === b["session_id"])
  if (live !== undefined) return new Reply(409, { detail: `session ${live.sessionId} already has an active run (${live.id})` })
  const r: FakeRun = {
    id: s.newId("run"),
    sessionId: b["session_id"] as string,
    baseModel: b["base_model"] as string,
    name: (b["name"] as string | undefined) ?? (b["base_model"] as string),
    createdAt: new Date().toISOString(),
    active: true,
    polls: 0,
    loraRank: (b["lora_rank"] as number | undefined) ?? 64,
    deactivations: 0,
  }
  s.runs.set(r.id, r)
  return new Reply(200, s.shapeCreated({ run: runJson(s, r) }))
}

/** `/v1/loops/runs/{run_id}` and `/v1/loops/runs/{run_id}/deactivate`. */
const oneRun = (s: State, method: string, seg: ReadonlyArray<string>, query: URLSearchParams, body: unknown): Reply | undefined => {
  const r = s.runs.get(seg[3]!)
  if (r === undefined) return notFound(`no run ${seg[3]}`)
  if (method === "GET" && seg.length === 4) {
    r.polls++
    return checkQuery(query, []) ?? new Reply(200, { run: runJson(s, r) })
  }
  if (method === "POST" && seg[4] === "deactivate" && seg.length === 5) {
    const problem = checkQuery(query, []) ?? checkEmptyBody(body)
    if (problem) return problem
    r.active = false
    r.deactivations++
    return new Reply(200, { id: r.id, base_model: r.baseModel, user })
  }
  return undefined
}

const listCheckpoints = (s: State, query: URLSearchParams): Reply => {
  const problem = checkQuery(query, ["run_id", "base_model", "checkpoint_path"]) ?? checkOneFilter(query)
  if (problem) return problem
  const list = s.checkpoints.filter((c) =>
    query.has("run_id") ? c.runId === query.get("run_id") : query.has("base_model") ? s.runs.get(c.runId)?.baseModel === query.get("base_model") : uriOf(c) === query.get("checkpoint_path")
  )
  return new Reply(200, { checkpoints: list.map((c) => checkpointJson(s, c)) })
}

const checkpointFiles = (s: State, checkpointId: string, query: URLSearchParams): Reply => {
  const problem = checkQuery(query, ["page_size", "page_token"])
  if (problem) return problem
  const c = s.checkpoints.find((x) => x.id === checkpointId)
  if (c === undefined) return notFound(`no checkpoint ${checkpointId}`)
  const size = Number(query.get("page_size") ?? s.filesPageSize)
  const token = Number(query.get("page_token") ?? 0)
  if (!Number.isInteger(size) || size < 1) return bad("page_size must be an integer >= 1")
  if (!Number.isInteger(token) || token < 0) return bad("page_token must be an integer >= 0")
  const page = c.files.slice(token, token + size).map((f) => {
    const t = `${c.id}-${Math.random().toString(36).slice(2)}`
    s.files.set(t, f.bytes)
    return { url: `${s.url}/files/${t}`, relative_file_name: f.name, node_rank: f.nodeRank ?? 0, size_bytes: f.bytes.length, last_modified: "2026-11-29T12:00:00Z" }
  })
  return new Reply(200, { presigned_urls: page, next_page_token: token + size < c.files.length ? token + size : null, total_count: c.files.length })
}

/** The answer to an authenticated `/v1/loops/*` request. */
export const control = (s: State, method: string, path: string, query: URLSearchParams, body: unknown): Reply => {
  const seg = path.split("/").slice(1) // v1, loops, ...
  const route = `${method} ${path}`
  if (route === "GET /v1/loops/capabilities") {
    return checkQuery(query, []) ?? new Reply(200, { supported_models: s.models.map((m) => ({ model_name: m, max_context_length: s.contextLength, supports_vision_language: false })) })
  }
  if (route === "POST /v1/loops/sessions") {
    const problem = checkQuery(query, []) ?? checkEmptyBody(body)
    if (problem) return problem
    const id = s.newId("ses")
    s.sessions.add(id)
    return new Reply(200, { session: { id } })
  }
  if (method === "GET" && seg[2] === "sessions" && seg.length === 4) return s.sessions.has(seg[3]!) ? new Reply(200, { session: { id: seg[3] } }) : notFound(`no session ${seg[3]}`)
  if (route === "POST /v1/loops/runs") return checkQuery(query, []) ?? createRun(s, body)
  if (route === "GET /v1/loops/runs") {
    const problem = checkQuery(query, ["run_id", "base_model", "scope"])
    if (problem) return problem
    const list = [...s.runs.values()].filter((r) => (!query.has("run_id") || r.id === query.get("run_id")) && (!query.has("base_model") || r.baseModel === query.get("base_model")))
    return new Reply(200, { runs: list.reverse().map((r) => runJson(s, r)) })
  }
  if (seg[2] === "runs" && seg.length >= 4) {
    const reply = oneRun(s, method, seg, query, body)
    if (reply !== undefined) return reply
  }
  if (method === "GET" && seg[2] === "deployments" && seg.length === 4) {
    const r = s.runs.get(seg[3]!.replace(/^d-/, ""))
    return r === undefined ? notFound(`no deployment ${seg[3]}`) : new Reply(200, { deployment: deploymentJson(s, seg[3]!, r) })
  }
  if (route === "GET /v1/loops/checkpoints") return listCheckpoints(s, query)
  if (method === "GET" && seg[2] === "checkpoints" && seg[4] === "files" && seg.length === 5) return checkpointFiles(s, seg[3]!, query)
  return notFound(`no route ${method} ${path}`)
}
