/**
 * The agent endpoint under the load of a real run: 1,024 agents that start together each
 * get their chat completion (none lost to a full listen queue), and an agent whose event
 * loop stays busy between two requests still gets its second answer on its kept-alive
 * connection. The agents are clients in a worker thread (`LoadClients.ts`).
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
})
