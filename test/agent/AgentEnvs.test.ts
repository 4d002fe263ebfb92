/**
 * Agent envs through the runner on the embedded backend: the two shipped examples (an AI
 * SDK `generateText` agent and a plain `openai` client loop, both on the real packages)
 * run 3 steps from the calculator model and train on the tool calls they make; agents
 * that throw, never call the endpoint, are refused their only request, or run past their
 * time are masked (with the refusal's message) or cut as documented.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Schema } from "effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import OpenAI from "openai"
import calculatorAgent from "../../envs/calculator-agent.ts"
import calculatorOpenai from "../../envs/calculator-openai.ts"
import * as Agent from "../../src/vocabulary/Agent.ts"
import { Local } from "../../src/backends/local/index.ts"
import * as Env from "../../src/vocabulary/Env.ts"
import * as Reward from "../../src/vocabulary/Reward.ts"
import * as RunLog from "../../src/folder/RunLog.ts"
import * as Runner from "../../src/Runner.ts"
import { quiet } from "../envs/vowels.ts"

const tmp = () => Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-agent-env-"))
const calculatorModel = (dir: string) => Layer.fresh(Local.layer({ modelDir: "models/calculator", seed: 0, stateDir: RunLog.paths(dir).state }))

const rowsOf = (dir: string) =>
  Fs.readFileSync(RunLog.paths(dir).rollouts, "utf8").trim().split("\n").map((l) => JSON.parse(l) as Record<string, unknown> & { turns?: Array<{ sampled: string; observation?: string }> })

describe("agent envs through the runner", () => {
  for (const env of [calculatorAgent, calculatorOpenai]) {
    it.effect(`${env.name}: 3 steps with its defaults train on the agent's tool calls`, () =>
      Effect.gen(function* () {
        const dir = tmp()
        const rows = yield* Runner.run(Runner.defaults(env.name, { outDir: dir, steps: 3, evalEvery: 0, saveEvery: 0, seed: 1 }), env).pipe(Effect.provide(calculatorModel(dir)), quiet)
        assert.strictEqual(rows.length, 3)
        for (const r of rows) assert.isAbove(r["env/all/reward/total"]!, 0.1)
        assert.strictEqual(rows[0]!["env/all/agent/diverged_tokens"], 0)
        const rollouts = rowsOf(dir)
        // the runner logs the rollouts of every other step: steps 1 and 3
        assert.deepStrictEqual([...new Set(rollouts.map((r) => r["step"]))], [1, 3])
        const called = rollouts.filter((r) => (r.turns?.length ?? 0) === 2)
        assert.isAbove(called.length, 10, "the calculator model calls the tool on some problems")
        for (const r of called) {
          assert.match(r.turns![0]!.sampled, /^\[\d+[-+*]\d+\]$/)
          assert.match(r.turns![0]!.observation!, /^=-?\d+;$/)
        }
        assert.deepStrictEqual(rollouts[0]!["agent"], { requests: rollouts[0]!.turns!.length, diverged: 0, rewritten: 0 })
      }))
  }

  const Problem = Schema.Struct({ n: Schema.Int })
  const source = Env.seeded(({ random }) => ({ n: random.int(0, 99) }))
  const agentWith = (name: string, run: Agent.AgentEnvInput<{ n: number }, never, never>["run"], limits = {}) =>
    Agent.env({ name, problem: Problem, source, run, limits, reward: Reward.make("len", (r) => r.completion.length) })
  const ask = async ({ baseURL, apiKey, model, signal }: Agent.AgentContext<{ n: number }>) => {
    const r = await new OpenAI({ baseURL, apiKey, maxRetries: 0 }).chat.completions.create({ model, messages: [{ role: "user", content: "What is" }] }, { signal })
    return r.choices[0]!.message.content
  }

  it.live("an agent that throws, or never calls the endpoint, is masked with its reason; one past its time is cut, and scored", () =>
    Effect.gen(function* () {
      const cases = [
        agentWith("throws", async (c) => {
          await ask(c)
          if (c.index % 2 === 0) throw new Error("the tool server is down")
          return "done"
        }),
        agentWith("silent", () => "nothing asked"),
        // a prompt longer than the model's context: its first request is refused, and the agent gives up
        agentWith("overlong", async (c) => {
          try {
            await new OpenAI({ baseURL: c.baseURL, apiKey: c.apiKey, maxRetries: 0 }).chat.completions.create({ model: c.model, messages: [{ role: "user", content: "x".repeat(300) }] }, { signal: c.signal })
          } catch {
            return "gave up"
          }
        }),
        agentWith("slow", async (c) => {
          await ask(c)
          await new Promise((resolve, reject) => c.signal.addEventListener("abort", () => reject(new Error("aborted"))))
        }, { timeout: "2 seconds" }),
      ]
      const seen: Record<string, Array<Record<string, unknown>>> = {}
      // maxMasked 1: runs that mask every sample still end, so their rows can be read
      for (const env of cases) {
        const dir = tmp()
        yield* Runner.run(Runner.defaults(env.name, { outDir: dir, steps: 1, groups: 1, groupSize: 4, evalEvery: 0, saveEvery: 0, maxMasked: 1 }), env).pipe(Effect.provide(calculatorModel(dir)), quiet)
        seen[env.name] = rowsOf(dir)
      }
      assert.deepStrictEqual(seen["throws"]!.map((r) => r["masked"]), ["infra_failed: the agent failed: the tool server is down", null, "infra_failed: the agent failed: the tool server is down", null])
      assert.deepStrictEqual(seen["throws"]!.map((r) => r["reward"]), [null, 4, null, 4])
      for (const r of seen["silent"]!) assert.include(String(r["masked"]), "the agent asked the endpoint for no completion")
      for (const r of seen["overlong"]!) {
        assert.match(String(r["masked"]), /^infra_failed: the endpoint refused the agent's request \(context_length_exceeded\): the conversation has 301 tokens; the model's context is 48: send fewer or shorter messages$/)
      }
      for (const r of seen["slow"]!) assert.deepStrictEqual([r["episodeStop"], r["masked"], (r["turns"] as Array<unknown>).length], ["timeout", null, 1])
    }))
  it.live("a reply the agent rewrote before re-sending it is kept in rollouts.jsonl as the text the policy was given", () =>
    Effect.gen(function* () {
      const env = agentWith("rewrites", async ({ baseURL, apiKey, model, signal }) => {
        const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 })
        const messages = [{ role: "user" as const, content: "What is" }]
        await client.chat.completions.create({ model, messages }, { signal })
        const second = await client.chat.completions.create({ model, messages: [...messages, { role: "assistant", content: "I will not add." }, { role: "user", content: "Please." }] }, { signal })
        return second.choices[0]!.message.content
      })
      const dir = tmp()
      yield* Runner.run(Runner.defaults(env.name, { outDir: dir, steps: 1, groups: 1, groupSize: 2, evalEvery: 0, saveEvery: 0 }), env).pipe(Effect.provide(calculatorModel(dir)), quiet)
      const rows = rowsOf(dir)
      assert.strictEqual(rows.length, 2)
      for (const r of rows) {
        assert.deepStrictEqual(r["agent"], { requests: 2, diverged: 0, rewritten: 1 })
        const turns = r["turns"] as Array<Record<string, unknown>>
        assert.strictEqual(turns[0]!["rewritten"], undefined, "the first turn was given the prompt only")
        // the char model's layout: the rewritten reply as it came, then the user's next words on a new line
        assert.strictEqual(turns[1]!["rewritten"], "I will not add.\nPlease.")
      }
    }))
})
