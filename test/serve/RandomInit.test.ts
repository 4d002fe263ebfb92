/**
 * A random model of Qwen3's vocabulary behind the Tinker wire (what `serve --random-init
 * --tokenizer <qwen3>` builds: `randomConfigFor`), with Qwen3's tokenizer on the client:
 * gsm8k, competition-math, python-code, search-qa and calculator-agent each run 2 steps end to end
 * over loopback, their prompts rendered by Qwen3's chat template, read from the envs'
 * fixtures (HF_HUB_OFFLINE=1 and an empty cache: the network is never touched).
 *
 * The random model writes no tool call by chance, so one test puts a scripted sampler in
 * front of it (a test double of the `Sampler` service, from its interface): sample 0 of
 * search-qa's first turn is a hermes `<tool_call>`, and after the search's passages come
 * back, the right `<answer>`. The run parses the call, runs the search, renders the tool
 * turn in Qwen3's layout, scores the answer, and trains on the mixed group over the wire.
 */
import { assert, describe, it } from "@effect/vitest"
import { ConfigProvider, Effect, Layer } from "effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import * as Client from "../../src/backends/http/client/Client.ts"
import * as Retry from "../../src/backends/http/client/Retry.ts"
import * as Server from "../../src/backends/http/server/Server.ts"
import { Local } from "../../src/backends/local/index.ts"
import { RANDOM_PREFIX_CACHE_SIZE, randomConfigFor } from "../../src/backends/local/Serve.ts"
import { modelInputFromTokens, modelInputTokens } from "../../src/contract/Contract.ts"
import * as RunLog from "../../src/folder/RunLog.ts"
import * as Runner from "../../src/Runner.ts"
import { Sampler, type SamplerShape } from "../../src/services/Sampler.ts"
import { Tokenizer, type TokenizerShape } from "../../src/services/Tokenizer.ts"
import { Trainer } from "../../src/services/Trainer.ts"
import * as HfTokenizer from "../../src/tokenizers/HfTokenizer.ts"
import calculatorAgent from "../../envs/calculator-agent.ts"
import competitionMath from "../../envs/competition-math.ts"
import gsm8k from "../../envs/gsm8k.ts"
import pythonCode from "../../envs/python-code.ts"
import searchQa, { FIXTURE as SEARCH_FIXTURE } from "../../envs/search-qa.ts"
import { quiet } from "../envs/vowels.ts"
import { fixtureRows, qwenDir } from "../envs/realModels.ts"

const tmp = () => Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-random-init-"))

// the envs read their Hub data sets offline: the cache is empty, so their fixtures. Given
// as the runs' ConfigProvider, not written to process.env: effect reads process.env once per
// process, and files before this one in the worker may have read it already.
const offline = ConfigProvider.layer(ConfigProvider.fromEnv({ env: { ...process.env, HF_HUB_OFFLINE: "1", GYRE_CACHE: tmp() } }))

type Rollout = { prompt: unknown; completion: string; reward: number; turns: Array<{ sampled: string; observation?: string }>; components: Record<string, number> }
const rolloutsOf = (dir: string) => Fs.readFileSync(RunLog.paths(dir).rollouts, "utf8").trim().split("\n").map((l) => JSON.parse(l) as Rollout)

/** The random model of the tokenizer's vocabulary, served over loopback as `serve` serves it. */
const served = (qwen: TokenizerShape, dir: string, script?: (real: SamplerShape) => SamplerShape) =>
  Effect.gen(function* () {
    const local = yield* Local.make({ config: randomConfigFor(qwen.vocabSize), prefixCacheSize: RANDOM_PREFIX_CACHE_SIZE, seed: 1, stateDir: RunLog.paths(dir).state })
    const sampler = script === undefined ? local.sampler : script(local.sampler)
    const server = yield* Server.make({ tokenizerId: qwen.name }).pipe(Effect.provideService(Trainer, local.trainer), Effect.provideService(Sampler, sampler))
    return Layer.mergeAll(Layer.fresh(Client.layer({ baseUrl: server.url, retry: Retry.fast })), Layer.succeed(Tokenizer, qwen), offline)
  })

const settings = (name: string, dir: string, overrides: Partial<Runner.RunSettings> = {}) =>
  Runner.defaults(name, { outDir: dir, steps: 2, groups: 1, groupSize: 2, evalEvery: 0, saveEvery: 0, logRolloutsEvery: 1, seed: 3, samplingOverrides: { maxTokens: 16 }, ...overrides })

describe("a random model of Qwen3's vocabulary behind serve, with Qwen3's tokenizer", () => {
  it.live("the model has Qwen3's vocabulary and 4,096 tokens of context; a GSM8K chat prompt fits", () =>
    Effect.gen(function* () {
      const qwen = yield* HfTokenizer.fromDirectory(qwenDir)
      const config = randomConfigFor(qwen.vocabSize)
      assert.strictEqual(config.vocabSize, 151_669)
      assert.strictEqual(config.contextLength, 4096)
      const row = fixtureRows(Path.join("envs", "data", "gsm8k.jsonl"))[0] as { question: string; answer: string }
      const text = yield* qwen.renderPrompt(gsm8k.prompt(row))
      assert.isBelow((yield* qwen.encode(text)).length, config.contextLength)
    }))

  for (const env of [gsm8k, competitionMath, pythonCode, calculatorAgent]) {
    it.live(`${env.name}: 2 steps, prompts rendered by Qwen3's chat template`, () =>
      Effect.gen(function* () {
        const qwen = yield* HfTokenizer.fromDirectory(qwenDir)
        const dir = tmp()
        // a test double of `Sampler` that records what it is asked, then asks the random model
        const prompts: Array<ReadonlyArray<number>> = []
        const record = (real: SamplerShape): SamplerShape => ({
          ...real,
          sample: (prompt, params, options) => Effect.suspend(() => (prompts.push(modelInputTokens(prompt)), real.sample(prompt, params, options))),
        })
        const backend = yield* served(qwen, dir, record)
        const rows = yield* Runner.run(settings(env.name, dir), env).pipe(Effect.provide(backend), quiet)
        assert.strictEqual(rows.length, 2)
        // every prompt is Qwen3's chat layout: <|im_start|>user ... <|im_start|>assistant\n
        const [imStart] = yield* qwen.encode("<|im_start|>")
        assert.isAbove(prompts.length, 0)
        for (const p of prompts) {
          assert.strictEqual(p[0], imStart)
          assert.isTrue(qwen.decode(p).endsWith("assistant\n"), qwen.decode(p))
        }
        const rollouts = rolloutsOf(dir)
        assert.strictEqual(rollouts.length, 4)
        for (const r of rollouts) assert.isString(r.completion)
        if (env.name === "calculator-agent") {
          // through the agent endpoint: the template rendered the request's tools
          assert.strictEqual(rows[0]!["env/all/agent/diverged_tokens"], 0)
        }
      }).pipe(Effect.scoped))
  }

  it.live("search-qa: a hermes tool call is parsed, the search runs, its passages come back in Qwen3's tool turn, and the answer is scored and trained on", () =>
    Effect.gen(function* () {
      const qwen = yield* HfTokenizer.fromDirectory(qwenDir)
      const questions = fixtureRows(SEARCH_FIXTURE) as Array<{ question: string; answer: string }>
      const [response] = yield* qwen.encode("<tool_response>")
      const encode = (text: string) => Effect.runSync(Effect.orDie(qwen.encode(text)))
      /** A test double of `Sampler`: sample 0 follows a script (search, then answer), the others are the random model's. */
      const script = (real: SamplerShape): SamplerShape => ({
        ...real,
        sample: (prompt, params, options) =>
          Effect.gen(function* () {
            const result = yield* real.sample(prompt, params, options)
            const tokens = modelInputTokens(prompt)
            const text = qwen.decode(tokens)
            const q = questions.find((x) => text.includes(x.question))
            if (q === undefined) return result
            const turn = tokens.includes(response!)
              ? encode(`<answer>${q.answer}</answer>`).concat([qwen.eos])
              : encode(`<tool_call>\n{"name": "search", "arguments": {"query": ${JSON.stringify(q.question)}}}\n</tool_call>`)
            const logprobs = (yield* real.computeLogprobs(modelInputFromTokens([...tokens, ...turn]))).slice(tokens.length)
            const scripted = { tokens: turn, logprobs, stopReason: "stop" as const }
            return { ...result, sequences: [scripted, ...result.sequences.slice(1)] }
          }),
      })
      const dir = tmp()
      const backend = yield* served(qwen, dir, script)
      const rows = yield* Runner.run(settings("search-qa", dir, { samplingOverrides: { maxTokens: 40 } }), searchQa).pipe(Effect.provide(backend), quiet)
      assert.strictEqual(rows.length, 2)
      const rollouts = rolloutsOf(dir)
      const scripted = rollouts.filter((r) => r.turns.length === 2)
      assert.strictEqual(scripted.length, 2, "sample 0 of each step searched, then answered")
      for (const r of scripted) {
        assert.match(r.turns[0]!.sampled, /^<tool_call>\n\{"name": "search"/)
        assert.match(r.turns[0]!.observation!, /^<\|im_end\|>\n<\|im_start\|>user\n<tool_response>\nDocument 1: /)
        assert.match(r.turns[1]!.sampled, /^<answer>.+<\/answer>$/)
        assert.strictEqual(r.components["f1"], 1)
      }
      // each group held a right answer and a random one: the step trained on them
      for (const row of rows) assert.isAbove(row["env/all/reward/total"]!, 0.5)
      for (const row of rows) {
        assert.strictEqual(row["by_group/frac_mixed"], 1)
        assert.strictEqual(row["train/datums"], 2)
      }
      assert.strictEqual(rows[1]!["policy_version/trainer"], 2)
    }).pipe(Effect.scoped))
})
