/**
 * An MCP server that goes down for good in the middle of a run: its episodes are masked
 * (never scored 0 as the policy's failure), counted as `tool/<name>/infra_failed`, and
 * after `MASKED_STEPS` masked steps in a row the run stops with an error naming the server.
 */
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Schema } from "effect"
import { Env, Reward, Tool } from "gyre"
import { McpToolset, Server } from "gyre/mcp"
import { Local } from "../../src/backends/local/index.ts"
import * as RunLog from "../../src/folder/RunLog.ts"
import * as Runner from "../../src/Runner.ts"
import { Sampler } from "../../src/services/Sampler.ts"
import { MASKED_STEPS } from "../../src/run/Steps.ts"
import { TINY, toySettings } from "../envs/vowels.ts"
import { scriptedSampler } from "../run/ScriptedSampler.ts"
import { FIXTURE, startHttp, stopHttp } from "./Fixture.ts"

const envAt = (url: string) =>
  Env.make({
    name: "echoes",
    problem: Schema.Struct({ n: Schema.Int }),
    source: Env.seeded(({ random }) => ({ n: random.int(0, 9) })),
    prompt: ({ n }) => `n=${n}:`,
    reward: Reward.make("answered", (r) => (r.completion.includes("ok") ? 1 : 0)),
    sampling: { maxTokens: 12, temperature: 1 },
    episode: McpToolset.episode({ syntax: Tool.brackets }),
    services: McpToolset.layer(Server.http(url), { timeout: "5 seconds", startTimeout: "5 seconds" }),
  })

describe("an MCP server lost for good mid-run", () => {
  it.live("masks its episodes, counts them, and stops the run naming the server", () =>
    Effect.gen(function* () {
      const server = yield* Effect.promise(() => startHttp(FIXTURE))
      yield* Effect.addFinalizer(() => Effect.promise(() => stopHttp(server.child)))
      const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-outage-"))
      // test double: the policy calls echo once, then answers
      const policy = scriptedSampler((text) => (text.includes(";") ? " ok" : "[echo hi]")).service
      const local = Local.layer({ config: TINY, seed: 0, stateDir: RunLog.paths(dir).state, lora: { rank: 4, alpha: 8, targets: ["q", "v"] } })
      const backend = Layer.provideMerge(Layer.succeed(Sampler, policy), local)
      // the server goes down for good once step 1 is done
      const progress = Effect.provideService(Runner.Progress, {
        onStep: ({ step }) => (step === 0 ? Effect.promise(() => stopHttp(server.child)) : Effect.void),
        onPhase: () => Effect.void,
      })
      const settings = toySettings(dir, { steps: 10, groups: 2, groupSize: 2, saveEvery: 0, logRolloutsEvery: 1, hackWatchEvery: 0 })
      const error = yield* Runner.run(settings, envAt(server.url)).pipe(Effect.provide(backend), progress, Effect.flip)
      assert.include(error.message, `${MASKED_STEPS} steps in a row masked more than 0.5`)
      assert.include(error.message, server.url)
      const rows = Fs.readFileSync(Path.join(dir, "metrics.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l) as Record<string, number>)
      assert.strictEqual(rows.length, 1 + MASKED_STEPS)
      assert.isUndefined(rows[0]!["tool/echo/infra_failed"])
      assert.strictEqual(rows[0]!["env/all/frac_masked"], 0)
      for (const row of rows.slice(1)) {
        assert.strictEqual(row["tool/echo/infra_failed"], 4, JSON.stringify(row))
        assert.strictEqual(row["env/all/frac_masked"], 1)
        assert.strictEqual(row["env/all/stop/infra_failed"], 1)
      }
      const rollouts = Fs.readFileSync(Path.join(dir, "rollouts.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l) as { step: number; masked: string | null; reward: number | null })
      const later = rollouts.filter((r) => r.step > 1)
      assert.strictEqual(later.length, 4 * MASKED_STEPS)
      for (const r of later) {
        assert.isNull(r.reward)
        assert.match(r.masked ?? "", /^infra_failed: tool echo: MCP server http:\/\/127\.0\.0\.1:\d+\/mcp: /)
      }
      for (const r of rollouts.filter((r) => r.step === 1)) assert.strictEqual(r.reward, 1)
    }).pipe(Effect.scoped), 60_000)
})
