/**
 * The agent endpoint under the load of a real run: 1,024 agents that start together each
 * get their chat completion (none lost to a full listen queue), and an agent whose event
 * loop stays busy between two requests still gets its second answer on its kept-alive
 * connection. The agents are clients in a worker thread (`LoadClients.ts`). A body over the
 * endpoint's limit is a 413 in OpenAI's error shape, naming the limit and the setting that
 * raises it, and `GET /v1/models` is answered while a large body is sent slowly.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as Endpoint from "../../src/agent/Endpoint.ts"
import { Local } from "../../src/backends/local/index.ts"
import { tinyConfig, tinyLora } from "../backends/local/helpers.ts"
import { burst, busyGap } from "../platform/LoadClients.ts"
import { raceHealth } from "../platform/SlowBody.ts"

const backend = () => Layer.fresh(Local.layer({ config: tinyConfig, lora: tinyLora, seed: 3, stateDir: fs.mkdtempSync(path.join(os.tmpdir(), "gyre-agent-load-")) }))
const session = { sampling: { maxTokens: 2, temperature: 1, seed: 5 }, affinityKey: "t", version: 0, index: 0, context: tinyConfig.contextLength, maxTurns: 3 }

describe("agent endpoint under load", () => {
  it.effect("1,024 agents that start together all get their completion", () =>
    Effect.gen(function* () {
      const endpoint = yield* Endpoint.make()
      const keys = yield* Effect.forEach(Array.from({ length: 1024 }, (_, i) => i), (i) => Effect.map(endpoint.open({ ...session, affinityKey: `g${i >> 4}`, index: i }), (o) => o.apiKey))
      const body = JSON.stringify({ model: Endpoint.MODEL, messages: [{ role: "user", content: "hi" }] })
      const outcome = yield* Effect.promise(() =>
        burst(`${endpoint.baseURL}/chat/completions`, keys.length, {
          method: "POST",
          headers: keys.map((k) => ({ authorization: `Bearer ${k}`, "content-type": "application/json" })),
          bodies: keys.map(() => body),
        })
      )
      assert.deepStrictEqual(outcome, { statuses: { "200": 1024 }, errors: {} })
    }).pipe(Effect.scoped, Effect.provide(backend())), 120_000)

  it.effect("an agent busy for 8 s between two requests gets its second answer", () =>
    Effect.gen(function* () {
      const endpoint = yield* Endpoint.make()
      const outcome = yield* Effect.promise(() => busyGap(`${endpoint.baseURL}/models`, 8_000))
      assert.deepStrictEqual(outcome, { first: "200", second: "200", reusedSocket: true })
    }).pipe(Effect.scoped, Effect.provide(backend())), 60_000)

  it.effect("a body over the limit is a 413 naming it and GYRE_AGENT_MAX_BODY_MB; /v1/models is answered while a large body is sent slowly", () =>
    Effect.gen(function* () {
      const endpoint = yield* Endpoint.make({ maxBodyBytes: 2 ** 20 })
      const { apiKey } = yield* endpoint.open(session)
      const headers = { authorization: `Bearer ${apiKey}` }
      const large = (chars: number) => new TextEncoder().encode(JSON.stringify({ model: Endpoint.MODEL, messages: [{ role: "user", content: "x".repeat(chars) }] }))
      const refused = yield* Effect.promise(async () => {
        const r = await fetch(`${endpoint.baseURL}/chat/completions`, { method: "POST", headers: { ...headers, "content-type": "application/json" }, body: large(2 ** 20) })
        return { status: r.status, body: (await r.json()) as { error: { message: string; code: string } } }
      })
      assert.strictEqual(refused.status, 413)
      assert.strictEqual(refused.body.error.code, "body_too_large")
      assert.match(refused.body.error.message, /over this server's limit of 1 MiB: send less per request, or raise the limit with the GYRE_AGENT_MAX_BODY_MB setting \(MiB\)$/)
      const race = yield* Effect.promise(() => raceHealth(`${endpoint.baseURL}/chat/completions`, large(2 ** 20 - 1000), `${endpoint.baseURL}/models`, { headers }))
      assert.notStrictEqual(race.big.status, 413, race.big.text)
      assert.deepStrictEqual([race.health.status, race.order], [200, ["health", "big"]])
    }).pipe(Effect.scoped, Effect.provide(backend())))
})
