/**
 * The agent endpoint's cost per completion: the same calculator prompts sampled on the
 * embedded calculator model (1) by a direct `Sampler.sample` call and (2) through the
 * endpoint by the `openai` client (HTTP over loopback, the request decoded, the
 * conversation rendered and encoded, the reply parsed and recorded), interleaved one by
 * one so both see the same machine. Prints p50 / p95 of each and of the difference.
 *
 * Run: npx tsx bench/agent.ts [completions, default 300]
 */
import { Effect, Layer } from "effect"
import { Sampler } from "gyre"
import OpenAI from "openai"
import * as Endpoint from "../src/agent/Endpoint.ts"
import { Local } from "../src/backends/local/index.ts"
import { modelInputFromTokens } from "../src/contract/Contract.ts"
import { encodePrompt, Tokenizer } from "../src/services/Tokenizer.ts"

const N = Number(process.argv[2] ?? 300)
const tools = [{ type: "function" as const, function: { name: "calc", parameters: { type: "object", properties: { expression: { type: "string" } } } } }]

const quantile = (xs: ReadonlyArray<number>, q: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(q * xs.length))]!
const ms = (x: number) => `${x.toFixed(2)} ms`

const program = Effect.gen(function* () {
  const sampler = yield* Sampler
  const tokenizer = yield* Tokenizer
  const endpoint = yield* Endpoint.make()
  const direct: Array<number> = []
  const viaEndpoint: Array<number> = []
  for (let i = 0; i < N; i++) {
    const question = `What is ${10 + (i % 90)} plus ${10 + ((i * 7) % 90)}?`
    const sampling = { maxTokens: 8, temperature: 1, seed: i, stop: ["]"] }
    const t0 = performance.now()
    const tokens = yield* encodePrompt(tokenizer, question)
    yield* sampler.sample(modelInputFromTokens(tokens), sampling, { numSamples: 1, affinityKey: `d${i}` })
    direct.push(performance.now() - t0)
    const { apiKey } = yield* endpoint.open({ sampling, affinityKey: `e${i}`, version: 0, index: 0, context: 48, maxTurns: 1 })
    const client = new OpenAI({ baseURL: endpoint.baseURL, apiKey, maxRetries: 0 })
    const t1 = performance.now()
    yield* Effect.promise(() => client.chat.completions.create({ model: endpoint.model, messages: [{ role: "user", content: question }], tools }))
    viaEndpoint.push(performance.now() - t1)
    yield* endpoint.close(apiKey)
  }
  const overhead = viaEndpoint.map((v, i) => v - direct[i]!)
  console.log(`${N} completions of the calculator model (8 tokens at most), interleaved:`)
  console.log(`  direct Sampler.sample      p50 ${ms(quantile(direct, 0.5))}  p95 ${ms(quantile(direct, 0.95))}`)
  console.log(`  openai client -> endpoint  p50 ${ms(quantile(viaEndpoint, 0.5))}  p95 ${ms(quantile(viaEndpoint, 0.95))}`)
  console.log(`  endpoint overhead          p50 ${ms(quantile(overhead, 0.5))}  p95 ${ms(quantile(overhead, 0.95))}  (ratio of p50s ${(quantile(viaEndpoint, 0.5) / quantile(direct, 0.5)).toFixed(2)})`)
})

await Effect.runPromise(program.pipe(Effect.scoped, Effect.provide(Layer.fresh(Local.layer({ modelDir: "models/calculator", seed: 0 })))))
