/**
 * A test double of the HTTP client's `Transport` (no network): each request is answered
 * by `answer`, given the method, the path and how many requests of that path came
 * before; every request is logged. Retries are logged through a real transport's
 * `logged`, so what gyre logs is what a user would see.
 */
import { Effect, Option } from "effect"
import type { HttpClient } from "effect/http"
import * as Retry from "../../../src/backends/http/client/Retry.ts"
import * as Transport from "../../../src/backends/http/client/Transport.ts"

/** An answer: a 2xx body, or a failure with its HTTP status (408: the server held a poll for its wait). */
export type Answer = { readonly body: unknown } | { readonly status: number; readonly message?: string }

export interface Sent {
  readonly method: "GET" | "POST"
  readonly path: string
  readonly body: unknown
  readonly headers: Record<string, string>
  /** the clock's time when it was sent (the TestClock's under `it.effect`) */
  readonly at: number
}

/** A transport whose answers come from `answer`; `sent` lists the requests in order. */
export const fakeTransport = (answer: (request: { readonly method: string; readonly path: string; readonly n: number; readonly body: unknown }) => Answer) => {
  const sent: Array<Sent> = []
  const counts = new Map<string, number>()
  // only its `logged` is used: the HTTP client is never called
  const real = Transport.make({ http: undefined as unknown as HttpClient.HttpClient, base: new URL("http://fake.invalid"), apiKey: Option.none() })
  const transport: Transport.Transport = {
    where: "http://fake.invalid",
    redact: (text) => text,
    logged: real.logged,
    send: (method, path, body, headers) =>
      Effect.flatMap(Effect.clockWith((c) => c.currentTimeMillis), (at) => {
        sent.push({ method, path, body, headers, at: Number(at) })
        const key = `${method} ${path}`
        const n = (counts.get(key) ?? 0) + 1
        counts.set(key, n)
        const a = answer({ method, path, n, body })
        if ("body" in a) return Effect.succeed({ status: 200, headers: {}, body: a.body })
        return Effect.fail(new Retry.HttpFailure({ kind: Retry.kindOfStatus(a.status) ?? "Fatal", status: a.status, message: a.message ?? `HTTP ${a.status}` }))
      }),
  }
  return { transport, sent }
}
