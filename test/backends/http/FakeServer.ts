/**
 * A scripted fake of the server (a test double): an `HttpClient` whose answers come
 * from a script per path, with the usual session endpoints filled in. Records every
 * request it sees, with the clock time.
 */
import { Effect, Layer } from "effect"
import { HttpClient, HttpClientError, HttpClientResponse } from "effect/http"

export interface Seen {
  readonly path: string
  readonly key: string | undefined
  readonly wait: string | undefined
  readonly body: unknown
  readonly at: number
}

/** "drop": the connection is lost; { error }: the request fails with that cause (a code like ECONNREFUSED) */
export type Script = (path: string, body: any, n: number) => { status: number; body?: unknown; headers?: Record<string, string> } | "drop" | { error: unknown } | undefined

export const fakeServer = (script: Script) => {
  const seen: Array<Seen> = []
  const counts: Record<string, number> = {}
  const client = HttpClient.make((request, url) =>
    Effect.gen(function* () {
      const path = url.pathname.replace(/^\/api\/v1\//, "")
      const text = request.body._tag === "Uint8Array" ? new TextDecoder().decode(request.body.body) : ""
      const body = text === "" ? undefined : JSON.parse(text)
      const at = Number(yield* Effect.clockWith((c) => c.currentTimeMillis))
      seen.push({ path, key: request.headers["x-idempotency-key"], wait: request.headers["x-gyre-wait-ms"], body, at })
      const n = (counts[path] = (counts[path] ?? 0) + 1)
      const base = (() => {
        switch (path) {
          case "create_session":
            return { status: 200, body: { type: "create_session", session_id: "s1" } }
          case "get_server_capabilities":
            return { status: 200, body: { supported_models: [{ model_name: "fake", max_context_length: 64 }] } }
          case "get_info":
            return { status: 200, body: { model_data: { model_name: "fake" }, model_id: "s1:train:0", lora_rank: 4, policy_version: 0 } }
          case "session_heartbeat":
            return { status: 200, body: { type: "session_heartbeat" } }
          default:
            return undefined
        }
      })()
      const answer = script(path, body, n) ?? base
      if (answer === "drop") {
        return yield* new HttpClientError.HttpClientError({ reason: new HttpClientError.TransportError({ request, description: "socket hang up" }) })
      }
      if (answer !== undefined && "error" in answer) {
        return yield* new HttpClientError.HttpClientError({ reason: new HttpClientError.TransportError({ request, cause: answer.error }) })
      }
      const a: { status: number; body?: unknown; headers?: Record<string, string> } = answer ?? { status: 404, body: { detail: `no ${path}` } }
      return HttpClientResponse.fromWeb(
        request,
        new Response(typeof a.body === "string" ? a.body : JSON.stringify(a.body ?? {}), { status: a.status, headers: { "content-type": "application/json", ...(a.headers ?? {}) } }),
      )
    }),
  )
  return { layer: Layer.succeed(HttpClient.HttpClient, client), seen, counts }
}
