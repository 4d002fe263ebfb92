/**
 * The agent endpoint on the embedded backend, called over loopback by the real `openai`
 * client and by plain fetch: what it serves, what it refuses (by name), the tokens and
 * log-probs it records, streaming, and the trainer's agreement with the sampler on an
 * agent episode's Datum.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Schema } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import OpenAI from "openai"
import * as Endpoint from "../../src/agent/Endpoint.ts"
import * as Agent from "../../src/vocabulary/Agent.ts"
import { BOS, encodeChars } from "../../src/backends/local/CharTokenizer.ts"
import { Local } from "../../src/backends/local/index.ts"
import * as Datum from "../../src/vocabulary/Datum.ts"
import * as Env from "../../src/vocabulary/Env.ts"
import * as Reward from "../../src/vocabulary/Reward.ts"
import { playAgents } from "../../src/run/AgentRollout.ts"
import { ContextLength } from "../../src/run/Rollout.ts"
import { Trainer } from "../../src/services/Trainer.ts"
import { tinyConfig, tinyLora } from "../backends/local/helpers.ts"

const backend = () => Layer.fresh(Local.layer({ config: tinyConfig, lora: tinyLora, seed: 3, stateDir: fs.mkdtempSync(path.join(os.tmpdir(), "gyre-agent-")) }))
const session = { sampling: { maxTokens: 6, temperature: 1, seed: 5 }, affinityKey: "t", version: 0, index: 0, context: tinyConfig.contextLength, maxTurns: 3 }
const clientOf = (baseURL: string, apiKey: string) => new OpenAI({ baseURL, apiKey, maxRetries: 0 })
const post = (url: string, key: string, body: unknown) =>
  Effect.promise(async () => {
    const r = await fetch(url, { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json" }, body: JSON.stringify(body) })
    return { status: r.status, body: (await r.json()) as { error?: { message: string; code: string } } }
  })

describe("agent endpoint", () => {
  it.effect("serves one model, and refuses unknown keys, other models and fields it cannot honour, naming them", () =>
    Effect.gen(function* () {
      const endpoint = yield* Endpoint.make()
      const { apiKey } = yield* endpoint.open(session)
      const models = yield* Effect.promise(() => clientOf(endpoint.baseURL, apiKey).models.list())
      assert.deepStrictEqual(models.data.map((m) => m.id), [Endpoint.MODEL])
      const chat = `${endpoint.baseURL}/chat/completions`
      const ask = { model: Endpoint.MODEL, messages: [{ role: "user", content: "hi" }] }
      const unknown = yield* post(chat, "nope", ask)
      assert.strictEqual(unknown.status, 401)
      const other = yield* post(chat, apiKey, { ...ask, model: "gpt-4o" })
      assert.strictEqual(other.status, 404)
      assert.include(other.body.error!.message, `"gpt-4o" is not served here`)
      for (const [field, value] of [["n", 2], ["tool_choice", "required"], ["logit_bias", { "5": 3 }], ["response_format", { type: "json_object" }]] as const) {
        const r = yield* post(chat, apiKey, { ...ask, [field]: value })
        assert.strictEqual(r.status, 400, field)
        assert.match(r.body.error!.message, new RegExp(`^${field} .* is refused: `), field)
      }
      const image = yield* post(chat, apiKey, { ...ask, messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "x" } }] }] })
      assert.strictEqual(image.status, 400)
      assert.include(image.body.error!.message, "messages[0]")
      // the retired key of an episode that ended
      yield* endpoint.close(apiKey)
      const late = yield* post(chat, apiKey, ask)
      assert.deepStrictEqual([late.status, late.body.error!.message], [401, "this episode is over: its key is retired"])
    }).pipe(Effect.scoped, Effect.provide(backend())))

  it.effect("answers with the policy's sample, records its tokens and log-probs, and streams the same answer", () =>
    Effect.gen(function* () {
      const endpoint = yield* Endpoint.make()
      const { apiKey, session: record } = yield* endpoint.open(session)
      const client = clientOf(endpoint.baseURL, apiKey)
      const r = yield* Effect.promise(() => client.chat.completions.create({ model: Endpoint.MODEL, messages: [{ role: "user", content: "ab" }], logprobs: true }))
      const [done] = record.completions
      assert.strictEqual(r.choices[0]!.message.content, done!.text)
      assert.deepStrictEqual(r.choices[0]!.logprobs!.content!.map((t) => t.logprob), [...done!.logprobs])
      assert.deepStrictEqual(r.usage, { prompt_tokens: done!.input.length, completion_tokens: done!.sampled.length, total_tokens: done!.input.length + done!.sampled.length })
      // the char model's layout: BOS, then the user's text
      const ab = encodeChars("ab")
      assert.deepStrictEqual([...done!.input], "ids" in ab ? [BOS, ...ab.ids] : [])
      const stream = yield* Effect.promise(() => client.chat.completions.create({ model: Endpoint.MODEL, messages: [{ role: "user", content: "cd" }], stream: true }))
      let text = ""
      yield* Effect.promise(async () => {
        for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? ""
      })
      assert.strictEqual(text, record.completions[1]!.text)
      const completion = yield* Effect.promise(() => client.completions.create({ model: Endpoint.MODEL, prompt: "ef", max_tokens: 3 }))
      assert.strictEqual(completion.choices[0]!.text, record.completions[2]!.text)
      const over = yield* post(`${endpoint.baseURL}/completions`, apiKey, { model: Endpoint.MODEL, prompt: "gh" })
      assert.deepStrictEqual([over.status, over.body.error!.code], [400, "max_turns"])
      assert.strictEqual(record.limit, "max_turns")
    }).pipe(Effect.scoped, Effect.provide(backend())))

  it.effect("refuses a sampling setting other than the run's, naming both values; the run's own value, or none, is sampled", () =>
    Effect.gen(function* () {
      const endpoint = yield* Endpoint.make()
      const run = { ...session, sampling: { ...session.sampling, temperature: 0.7, topP: 0.9 }, maxTurns: 8 }
      const { apiKey, session: record } = yield* endpoint.open(run)
      const chat = `${endpoint.baseURL}/chat/completions`
      const ask = { model: Endpoint.MODEL, messages: [{ role: "user", content: "hi" }] }
      // the settings the run has (its temperature, top_p, top_k), and those it never uses
      const refused: Array<[string, unknown, RegExp, string]> = [
        ["temperature", 0, /^temperature 0 is refused: this run samples at temperature 0\.7\b.*send temperature 0\.7 or leave it out/, "unsupported_sampling"],
        ["top_p", 1, /^top_p 1 is refused: this run samples at top_p 0\.9\b/, "unsupported_sampling"],
        ["top_k", 40, /^top_k 40 is refused: this run samples with no top_k\b/, "unsupported_sampling"],
        ["min_p", 0.05, /^min_p 0\.05 is refused: this run samples with no min_p \(0\)/, "unsupported_field"],
        ["repetition_penalty", 1.2, /^repetition_penalty 1\.2 is refused: this run samples with no repetition penalty \(1\)/, "unsupported_field"],
      ]
      for (const [field, value, message, code] of refused) {
        const r = yield* post(chat, apiKey, { ...ask, [field]: value })
        assert.deepStrictEqual([r.status, r.body.error?.code], [400, code], field)
        assert.match(r.body.error!.message, message, field)
      }
      assert.strictEqual(record.completions.length, 0, "nothing refused was sampled")
      for (const same of [{}, { temperature: 0.7 }, { top_p: 0.9 }, { top_k: -1 }, { top_k: 0 }, { temperature: null }]) {
        const r = yield* post(chat, apiKey, { ...ask, ...same })
        assert.strictEqual(r.status, 200, JSON.stringify(same))
      }
      const text = yield* post(`${endpoint.baseURL}/completions`, apiKey, { model: Endpoint.MODEL, prompt: "ab", temperature: 1.5 })
      assert.match(text.body.error!.message, /^temperature 1\.5 is refused: this run samples at temperature 0\.7\b/)
    }).pipe(Effect.scoped, Effect.provide(backend())))

  it.effect("a completion's id and its tool calls' ids carry nothing of the episode's key", () =>
    Effect.gen(function* () {
      const endpoint = yield* Endpoint.make()
      const tools = [{ type: "function" as const, function: { name: "echo", parameters: { type: "object", properties: { text: { type: "string" } } } } }]
      const ids: Array<[string, string]> = []
      for (let i = 0; i < 3; i++) {
        const { apiKey } = yield* endpoint.open({ ...session, index: i })
        const client = clientOf(endpoint.baseURL, apiKey)
        const chat = yield* Effect.promise(() => client.chat.completions.create({ model: Endpoint.MODEL, messages: [{ role: "user", content: "n1" }], tools }))
        const text = yield* Effect.promise(() => client.completions.create({ model: Endpoint.MODEL, prompt: "ab", max_tokens: 2 }))
        for (const id of [chat.id, text.id, ...(chat.choices[0]!.message.tool_calls ?? []).map((c) => c.id)]) ids.push([id, apiKey])
      }
      // no 6 characters in a row of any key's random part appear in an id
      const windows = (key: string) => Array.from({ length: key.length - 5 }, (_, j) => key.slice(j, j + 6))
      for (const [id, key] of ids) for (const w of windows(key.replace(/^gyre-episode-/, ""))) assert.notInclude(id, w, `${id} carries ${w} of ${key}`)
      assert.strictEqual(new Set(ids.map(([id]) => id)).size, ids.length, "every id is new")
    }).pipe(Effect.scoped, Effect.provide(backend())))

  it.effect("an agent episode's tokens chain turn to turn into one Datum whose sampler log-probs the trainer reproduces (|diff| < 1e-4)", () =>
    Effect.gen(function* () {
      const twoTurns = Agent.env({
        name: "two-turns",
        problem: Schema.Struct({ n: Schema.Int }),
        source: Env.seeded(({ random }) => ({ n: random.int(0, 9) })),
        run: async ({ problem, baseURL, apiKey, model }) => {
          const client = clientOf(baseURL, apiKey)
          const tools = [{ type: "function" as const, function: { name: "echo", parameters: { type: "object", properties: { text: { type: "string" } } } } }]
          const first = await client.chat.completions.create({ model, messages: [{ role: "user", content: `n${problem.n}` }], tools })
          const reply = first.choices[0]!.message
          const second = await client.chat.completions.create({
            model,
            tools,
            messages: [{ role: "user", content: `n${problem.n}` }, reply, { role: "tool", tool_call_id: "c0", content: "ok" }],
          })
          return second.choices[0]!.message.content
        },
        reward: Reward.make("len", (r) => r.completion.length),
      })
      const endpoint = yield* Endpoint.make()
      const { episodes } = yield* playAgents({
        env: twoTurns,
        task: { key: "two-turns/train/0/0", env: "two-turns", problem: { n: 4 } },
        sampling: { maxTokens: 5, temperature: 1, seed: 11 },
        numSamples: 4,
        affinityKey: "agent",
        version: 0,
        step: 0,
      }).pipe(Effect.provideService(ContextLength, tinyConfig.contextLength), Effect.provideService(Endpoint.Endpoint, endpoint))
      assert.deepStrictEqual(episodes.map((e): Array<unknown> => [e.turns.length, e.stop, e.agent?.requests]), Array.from({ length: 4 }, () => [2, "completed", 2]))
      for (const e of episodes) assert.strictEqual(e.turns[0]!.observation?.endsWith("=ok;"), true, JSON.stringify(e.turns))
      const data = episodes.flatMap((e) => Datum.episode(e.turns, 1))
      assert.strictEqual(data.length, 4, "each episode is one Datum")
      const out = yield* (yield* Trainer).forward(data, "importance_sampling")
      let worst = 0
      let trained = 0
      data.forEach((d, k) => {
        const adv = d.lossFnInputs["advantages"]!.data
        d.lossFnInputs["logprobs"]!.data.forEach((q, i) => {
          if (adv[i] === 0) return
          trained++
          worst = Math.max(worst, Math.abs(q - out.lossFnOutputs[k]!.logprobs[i]!))
        })
      })
      assert.isAbove(trained, 8)
      assert.isBelow(worst, 1e-4)
    }).pipe(Effect.scoped, Effect.provide(backend())))
})
