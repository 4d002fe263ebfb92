/**
 * An independent client of the documented Tinker JSON format (reference/tinker-protocol.md):
 * plain `fetch` with JSON bodies, no gyre client code, for conformance tests of the server.
 */
import { Effect } from "effect"

export interface Answer {
  readonly status: number
  readonly body: any
  readonly headers: Headers
}

/**
 * One request. Redirects are not followed, as the official SDK does not follow the archive
 * route's 302 (`resources/weights.py`, `follow_redirects = False`): the answer is the 302.
 */
export const call = (base: string, method: "GET" | "POST", path: string, body?: unknown, headers: Record<string, string> = {}) =>
  Effect.promise(async (): Promise<Answer> => {
    const res = await fetch(`${base}/api/v1/${path}`, {
      method,
      redirect: "manual",
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      headers: { "content-type": "application/json", ...headers },
    })
    const text = await res.text()
    let parsed: unknown = text
    try {
      parsed = JSON.parse(text)
    } catch {
      // not JSON: keep the text
    }
    return { status: res.status, body: parsed, headers: res.headers }
  })

export const post = (base: string, path: string, body: unknown, headers: Record<string, string> = {}) => call(base, "POST", path, body, headers)

/** Polls a future (each poll held at most the server's pollWait) until it is not `try_again`. */
export const result = (base: string, requestId: string) =>
  Effect.gen(function* () {
    for (let i = 0; i < 1000; i++) {
      const a = yield* post(base, "retrieve_future", { request_id: requestId })
      if (a.status !== 200 || a.body?.type !== "try_again") return a
    }
    throw new Error(`future ${requestId} never finished`)
  })

/** A session and a model on it (`lora_config` optional). */
export const session = (base: string) =>
  Effect.map(post(base, "create_session", { tags: [], type: "create_session" }), (a) => a.body.session_id as string)

export const createModel = (base: string, sessionId: string, baseModel: string, modelSeqId = 0, rank?: number) =>
  Effect.gen(function* () {
    const a = yield* post(base, "create_model", {
      session_id: sessionId,
      model_seq_id: modelSeqId,
      base_model: baseModel,
      ...(rank !== undefined ? { lora_config: { rank, train_unembed: true, train_mlp: true, train_attn: true } } : {}),
      type: "create_model",
    })
    if (a.status !== 200) return a
    return yield* result(base, a.body.request_id)
  })

/** A wire datum: model_input = full[:-1], target_tokens = full[1:]. */
export const wireDatum = (full: ReadonlyArray<number>, inputs: Record<string, ReadonlyArray<number>>) => ({
  model_input: { chunks: [{ type: "encoded_text", tokens: full.slice(0, -1) }] },
  loss_fn_inputs: {
    target_tokens: { data: full.slice(1), dtype: "int64" },
    ...Object.fromEntries(Object.entries(inputs).map(([k, v]) => [k, { data: [...v], dtype: "float32" }])),
  },
})

/** Submits a training call and waits for its outcome. */
export const train = (base: string, path: string, body: unknown) =>
  Effect.gen(function* () {
    const a = yield* post(base, path, body)
    if (a.status !== 200) return a
    return yield* result(base, a.body.request_id)
  })
