/**
 * Idempotent submissions: a POST sent again with an `X-Idempotency-Key` already seen
 * gets the first answer again (the same `request_id`), so a retried POST never runs
 * twice. The same key with another body gets 422; a refused request (4xx) frees its
 * key, so it can be fixed and sent again.
 *
 * @since 0.1.0
 */
import { Deferred, Effect } from "effect"
import { createHash } from "node:crypto"
import type { Reply } from "./Requests.ts"

interface Entry {
  readonly hash: string
  readonly reply: Deferred.Deferred<Reply>
  readonly at: number
  requestId: string | undefined
}

/** @since 0.1.0 @category models */
export interface IdempotencyCache {
  /** runs `run` once per key; a repeat waits for and gets the first reply */
  readonly run: (key: string | undefined, bodyText: string, run: Effect.Effect<Reply>) => Effect.Effect<Reply>
  /** forgets keys whose future is gone (or, without a future, older than the ttl) */
  readonly sweep: (futureExists: (id: string) => boolean) => Effect.Effect<void>
  /** answers given from the cache */
  readonly deduplicated: () => number
}

const sha256 = (text: string) => createHash("sha256").update(text).digest("hex")

/** @since 0.1.0 @category constructors */
export const make = (options: { readonly ttlMillis: number; readonly now: Effect.Effect<number> }): IdempotencyCache => {
  const entries = new Map<string, Entry>()
  let deduplicated = 0

  const run = (key: string | undefined, bodyText: string, work: Effect.Effect<Reply>) =>
    Effect.gen(function* () {
      if (key === undefined || key === "") return yield* work
      if (key.length > 256) return { status: 400, body: { detail: "X-Idempotency-Key is longer than 256 characters" } }
      const hash = sha256(bodyText)
      const existing = entries.get(key)
      if (existing !== undefined) {
        if (existing.hash !== hash) return { status: 422, body: { detail: "X-Idempotency-Key was already used with a different body" } }
        deduplicated++
        return yield* Deferred.await(existing.reply)
      }
      const entry: Entry = { hash, reply: yield* Deferred.make<Reply>(), at: yield* options.now, requestId: undefined }
      entries.set(key, entry)
      // uninterruptible: a client that hangs up must not leave started work without a cached reply
      const reply = yield* Effect.uninterruptible(work)
      const b = reply.body
      if (reply.status === 200 && typeof b === "object" && b !== null && "request_id" in b && typeof b.request_id === "string") entry.requestId = b.request_id
      if (reply.status >= 400) entries.delete(key)
      yield* Deferred.succeed(entry.reply, reply)
      return reply
    })

  const sweep = (futureExists: (id: string) => boolean) =>
    Effect.gen(function* () {
      const t = yield* options.now
      for (const [key, e] of entries) {
        if (e.requestId !== undefined ? !futureExists(e.requestId) : t - e.at > options.ttlMillis) entries.delete(key)
      }
    })

  return { run, sweep, deduplicated: () => deduplicated }
}
