/**
 * A toolset whose tools take arrays or objects, offered in the bracket call syntax (which
 * ends a call at the first `]`), is refused when the run starts: before any sample, with
 * one message naming the tools and what to write instead in the API the env used.
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
import { quiet, TINY, toySettings } from "../envs/vowels.ts"
import { scriptedSampler } from "../run/ScriptedSampler.ts"
import { ROOT } from "./Fixture.ts"

const GRAPH = Path.join(ROOT, "test/mcp/fixtures/graph-server.mjs")
const graphServer = (file: string) => Server.stdio({ command: process.execPath, args: [GRAPH], env: { GRAPH_FILE: file }, cwd: ROOT })

const Problem = Schema.Struct({ n: Schema.Int })
const base = {
  name: "graph",
  problem: Problem,
  source: Env.seeded(({ random }) => ({ n: random.int(0, 9) })),
  prompt: ({ n }: typeof Problem.Type) => `n=${n}:`,
  reward: Reward.make("answered", () => 1),
  sampling: { maxTokens: 12, temperature: 1 },
}

/** Runs `env` for 2 steps on the tiny embedded trainer and a scripted policy (a test double); the error and how often the policy was sampled. */
const refusedRun = (env: Env.AnyEnv) =>
  Effect.gen(function* () {
    const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-start-check-"))
    const policy = scriptedSampler(() => "[read_graph]")
    const local = Local.layer({ config: TINY, seed: 0, stateDir: RunLog.paths(dir).state, lora: { rank: 4, alpha: 8, targets: ["q", "v"] } })
    const error = yield* Runner.run(toySettings(dir, { steps: 2, groups: 1, groupSize: 2, saveEvery: 0 }), env).pipe(
      Effect.provide(Layer.provideMerge(Layer.succeed(Sampler, policy.service), local)),
      quiet,
      Effect.flip,
    )
    return { error, samples: policy.calls.length, steps: Fs.existsSync(Path.join(dir, "metrics.jsonl")) ? Fs.readFileSync(Path.join(dir, "metrics.jsonl"), "utf8").trim().split("\n").filter((l) => l.length > 0).length : 0 }
  })

describe("a toolset the bracket syntax cannot carry", () => {
  it.live("with a server per episode: refused at the run's start, naming McpToolset.perEpisode", () =>
    Effect.gen(function* () {
      const file = Path.join(Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-graph-")), "graph.json")
      // "auto" with the embedded character tokenizer: the bracket syntax
      const env = Env.make({ ...base, episode: McpToolset.perEpisode(graphServer(file)) })
      const { error, samples, steps } = yield* refusedRun(env)
      assert.strictEqual(error._tag, "RunError")
      assert.strictEqual(error.message.split("\n").length, 1)
      assert.match(error.message, /^env graph: tools of .*graph-server\.mjs take arrays or objects, which the bracket call syntax cannot carry/)
      assert.include(error.message, "create_entities (entities), add_observations (observations), delete_entities (entityNames)")
      assert.include(error.message, "Use McpToolset.perEpisode(server, { syntax: Tool.hermes })")
      assert.include(error.message, 'or offer only the others with McpToolset.perEpisode(server, { include: ["read_graph", "search_nodes"] })')
      assert.notInclude(error.message, "McpToolset.layer")
      assert.notInclude(error.message, "McpToolset.episode")
      assert.notInclude(error.message, "problem")
      assert.strictEqual(samples, 0, "nothing was sampled")
      assert.strictEqual(steps, 0, "no step ran")
    }))

  it.live("with one server for the run: refused at the run's start, naming McpToolset.episode and McpToolset.layer", () =>
    Effect.gen(function* () {
      const file = Path.join(Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-graph-")), "graph.json")
      const env = Env.make({ ...base, episode: McpToolset.episode({ syntax: Tool.brackets }), services: McpToolset.layer(graphServer(file)) })
      const { error, samples } = yield* refusedRun(env)
      assert.include(error.message, "Use McpToolset.episode({ syntax: Tool.hermes })")
      assert.include(error.message, 'McpToolset.layer(server, { include: ["read_graph", "search_nodes"] })')
      assert.strictEqual(samples, 0)
    }))

  it.live("in the hermes syntax: the run starts", () =>
    Effect.gen(function* () {
      const file = Path.join(Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-graph-")), "graph.json")
      const env = Env.make({ ...base, episode: McpToolset.perEpisode(graphServer(file), { syntax: Tool.hermes, include: ["read_graph"] }) })
      const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-start-check-"))
      const policy = scriptedSampler(() => " done")
      const local = Local.layer({ config: TINY, seed: 0, stateDir: RunLog.paths(dir).state, lora: { rank: 4, alpha: 8, targets: ["q", "v"] } })
      const rows = yield* Runner.run(toySettings(dir, { steps: 1, groups: 1, groupSize: 2, saveEvery: 0 }), env).pipe(
        Effect.provide(Layer.provideMerge(Layer.succeed(Sampler, policy.service), local)),
        quiet,
      )
      assert.strictEqual(rows.length, 1)
    }))
})
