/**
 * The fake control plane's strictness: what the Loops API reference documents for a
 * request, and a 400 naming anything else (an unknown or missing field, a field of the
 * wrong type, an unknown query parameter).
 */

/** An answer of the fake. */
export class Reply {
  constructor(readonly status: number, readonly body: unknown) {}
}

export const bad = (message: string) => new Reply(400, { detail: message })
export const notFound = (message: string) => new Reply(404, { detail: message })

/** `CreateLoopsRunRequestV1`'s fields and their types. */
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

/** A 400 for a query parameter the route does not document. */
export const checkQuery = (query: URLSearchParams, allowed: ReadonlyArray<string>) => {
  for (const k of query.keys()) if (!allowed.includes(k)) return bad(`unknown query parameter '${k}'`)
  return undefined
}

/** A 400 for a body on a route that takes none (an empty object passes). */
export const checkEmptyBody = (body: unknown) => {
  if (body === undefined) return undefined
  if (typeof body !== "object" || body === null || Array.isArray(body)) return bad("this route takes no body")
  const k = Object.keys(body)[0]
  return k === undefined ? undefined : bad(`unknown field '${k}'`)
}

/** A 400 for a `POST /v1/loops/runs` body that is not a `CreateLoopsRunRequestV1`. */
export const checkRunBody = (body: unknown): Reply | undefined => {
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

/** A 400 for a checkpoints query without exactly one filter. */
export const checkOneFilter = (query: URLSearchParams) => {
  const given = ["run_id", "base_model", "checkpoint_path"].filter((k) => query.has(k))
  return given.length === 1 ? undefined : bad(`provide exactly one of run_id, base_model, checkpoint_path (got ${given.length === 0 ? "none" : given.join(", ")})`)
}
