/**
 * An MCP server that goes down in the middle of a run: its episodes are masked (never
 * scored 0 as the policy's failure) and counted as `tool/<name>/infra_failed`.
 *
 * - down for a few seconds (a restart): a default run waits it out between steps and
 *   goes on training once the server is back;
 * - down for good: the run stops once the masked steps have lasted both enough steps
 *   and long enough (shortened here through `MaskedPatience`), naming the server;
 * - a run that ends with most of its steps masked fails, saying how many and why.
 */
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber, Layer, Schema } from "effect"
import { Env, Reward, Tool } from "gyre"
import { McpToolset, Server } from "gyre/mcp"
import { Local } from "../../src/backends/local/index.ts"
import * as RunLog from "../../src/folder/RunLog.ts"
import * as Runner from "../../src/Runner.ts"
import { Sampler } from "../../src/services/Sampler.ts"
import { MaskedPatience } from "../../src/run/MaskedWatch.ts"
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

type Row = Record<string, number>
const metricsOf = (dir: string): Array<Row> => Fs.readFileSync(Path.join(dir, "metrics.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l) as Row)

/** The embedded tiny model as trainer, and a test double as the policy: it calls echo once, then answers. */
const backendIn = (dir: string) => {
  const policy = scriptedSampler((text) => (text.includes(";") ? " ok" : "[echo hi]")).service
  const local = Local.layer({ config: TINY, seed: 0, stateDir: RunLog.paths(dir).state, lora: { rank: 4, alpha: 8, targets: ["q", "v"] } })
  return Layer.provideMerge(Layer.succeed(Sampler, policy), local)
}

/** Calls `atStep` once step `step` (0-based) is done; no output. */
const afterStep = (step: number, atStep: Effect.Effect<void>) =>
  Effect.provideService(Runner.Progress, { onStep: (s) => (s.step === step ? atStep : Effect.void), onPhase: () => Effect.void })

const settingsIn = (dir: string, steps: number) => toySettings(dir, { steps, groups: 2, groupSize: 2, saveEvery: 0, logRolloutsEvery: 1, hackWatchEvery: 0 })

describe("an MCP server down in the middle of a run", () => {
  it.live("for a few seconds: a default run waits it out and goes on training once it is back", () =>
    Effect.gen(function* () {
      const first = yield* Effect.promise(() => startHttp(FIXTURE))
      const port = Number(new URL(first.url).port)
      let again: Awaited<ReturnType<typeof startHttp>> | undefined
      yield* Effect.addFinalizer(() => Effect.promise(async () => {
        await stopHttp(first.child)
        if (again !== undefined) await stopHttp(again.child)
      }))
      const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-flap-"))
      // the server goes down once step 1 is done, and is back on its port 3 s later
      const flap = Effect.promise(() => stopHttp(first.child)).pipe(
        Effect.andThen(Effect.sleep("3 seconds")),
        Effect.andThen(Effect.promise(async () => {
          again = await startHttp(FIXTURE, port)
        })),
      )
      let restarting: Fiber.Fiber<void> | undefined
      const run = Runner.run(settingsIn(dir, 8), envAt(first.url)).pipe(
        Effect.provide(backendIn(dir)),
        afterStep(0, Effect.asVoid(Effect.tap(Effect.forkDetach(flap), (f) => Effect.sync(() => (restarting = f))))),
      )
      const rows = yield* run
      if (restarting !== undefined) yield* Fiber.join(restarting)
      assert.strictEqual(rows.length, 8)
      const masked = rows.filter((r) => r["env/all/frac_masked"] === 1)
      assert.isAbove(masked.length, 0, "the steps while the server was down are masked")
      for (const r of masked) assert.strictEqual(r["env/all/masked"], 4)
      // the run trained on scored samples again once the server was back
      assert.strictEqual(rows.at(-1)!["env/all/frac_masked"], 0)
      assert.strictEqual(rows.at(-1)!["env/all/reward/total"], 1)
      assert.strictEqual(metricsOf(dir).length, 8)
    }).pipe(Effect.scoped))

  it.live("for good: the run stops once its masked steps have lasted, naming the server", () =>
    Effect.gen(function* () {
      const server = yield* Effect.promise(() => startHttp(FIXTURE))
      yield* Effect.addFinalizer(() => Effect.promise(() => stopHttp(server.child)))
      const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-outage-"))
      const error = yield* Runner.run(settingsIn(dir, 30), envAt(server.url)).pipe(
        Effect.provide(backendIn(dir)),
        afterStep(0, Effect.promise(() => stopHttp(server.child))),
        // the default's 3 steps and 30 s, made 3 steps and 1 s
        Effect.provideService(MaskedPatience, { steps: 3, lasting: "1 second", firstWait: "100 millis", maxWait: "400 millis" }),
        Effect.flip,
      )
      assert.match(error.message, /^\d+ steps in a row, over \d+ s, masked more than 0.5 of their samples/)
      assert.include(error.message, server.url)
      const rows = metricsOf(dir)
      assert.isAtLeast(rows.length, 1 + 3)
      assert.isBelow(rows.length, 30)
      assert.isUndefined(rows[0]!["tool/echo/infra_failed"])
      assert.strictEqual(rows[0]!["env/all/frac_masked"], 0)
      for (const row of rows.slice(1)) {
        assert.strictEqual(row["tool/echo/infra_failed"], 4, JSON.stringify(row))
        assert.strictEqual(row["env/all/frac_masked"], 1)
        assert.strictEqual(row["env/all/stop/infra_failed"], 1)
        // a masked sample's components are not averaged in
        assert.isUndefined(row["env/all/answered"])
      }
      const rollouts = Fs.readFileSync(Path.join(dir, "rollouts.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l) as { step: number; masked: string | null; reward: number | null })
      const later = rollouts.filter((r) => r.step > 1)
      assert.strictEqual(later.length, 4 * (rows.length - 1))
      for (const r of later) {
        assert.isNull(r.reward)
        assert.match(r.masked ?? "", /^infra_failed: tool echo: MCP server http:\/\/127\.0\.0\.1:\d+\/mcp: /)
      }
      for (const r of rollouts.filter((r) => r.step === 1)) assert.strictEqual(r.reward, 1)
    }).pipe(Effect.scoped))

  it.live("until a short run ends: the run fails, saying how many steps were masked and why", () =>
    Effect.gen(function* () {
      const server = yield* Effect.promise(() => startHttp(FIXTURE))
      yield* Effect.addFinalizer(() => Effect.promise(() => stopHttp(server.child)))
      const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-masked-end-"))
      const error = yield* Runner.run(settingsIn(dir, 3), envAt(server.url)).pipe(
        Effect.provide(backendIn(dir)),
        afterStep(0, Effect.promise(() => stopHttp(server.child))),
        Effect.provideService(MaskedPatience, { steps: 3, lasting: "1 hour", firstWait: "10 millis", maxWait: "10 millis" }),
        Effect.flip,
      )
      assert.include(error.message, "2 of the 3 steps run masked more than 0.5 of their samples")
      assert.include(error.message, "infra_failed: tool echo: MCP server")
      assert.include(error.message, `Its folder ${dir} holds every step and checkpoint`)
      assert.strictEqual(metricsOf(dir).length, 3)
    }).pipe(Effect.scoped))
})
