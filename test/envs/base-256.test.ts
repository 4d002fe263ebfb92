import { assert, beforeAll, describe, it } from "@effect/vitest"
import * as fs from "node:fs"
import { decodeChars, encodeChars, EOS } from "../../src/backends/local/CharTokenizer.ts"
import { loadBaseModel } from "../../src/backends/local/Checkpoint.ts"
import { initTf } from "../../src/backends/local/index.ts"
import { LocalModel, type ModelConfig, type Weights } from "../../src/backends/local/Model.ts"
import { LocalSamplerEngine } from "../../src/backends/local/SamplerEngine.ts"
import { checkSample } from "../../src/backends/local/Validate.ts"
import { Env } from "gyre"
import inventory, { type Problem } from "../../envs/inventory.ts"
import { ITEMS } from "../../envs/mcp/inventory-data.ts"
import { inventoryCall, promptOf } from "../../scripts/mixed-data.ts"
import { inventoryReply } from "../../scripts/mixed-episodes.ts"

// models/base-256: the base model with a 256-token context, pretrained on every shipped env's format.
let config: ModelConfig
let weights: Weights
let sampler: LocalSamplerEngine

const ids = (text: string): Array<number> => {
  const r = encodeChars(text)
  if (!("ids" in r)) throw new Error(`cannot encode ${JSON.stringify(text)}`)
  return r.ids
}

const greedy = async (prompt: ReadonlyArray<number>, maxTokens: number, stop?: ReadonlyArray<string>) =>
  (await sampler.sample(prompt, { maxTokens, temperature: 0, ...(stop ? { stop: [...stop] } : {}) }, { numSamples: 1 })).sequences[0]!

beforeAll(async () => {
  await initTf()
  ;({ config, weights } = await loadBaseModel("models/base-256"))
  sampler = new LocalSamplerEngine(new LocalModel(config, weights), { seed: 0 })
})

describe("models/base-256", () => {
  it("has a 256-token context, the char tokenizer, and weights small enough to ship", () => {
    assert.strictEqual(config.contextLength, 256)
    assert.strictEqual(config.vocabSize, 99)
    assert.isBelow(fs.statSync("models/base-256/weights.bin").size, 2_000_000)
  })

  it("samples after a 200-character prompt, which models/base's 48-token context refuses", async () => {
    const prompt = [1, ...ids(`${"Tools: [stock item] [price item]. ".repeat(6).slice(0, 186)}Price of lamp?`)]
    assert.strictEqual(prompt.length, 201)
    const limits = (contextLength: number) => ({ vocabSize: 99, contextLength })
    assert.isUndefined(checkSample(prompt, { maxTokens: 12, temperature: 1 }, 1, limits(config.contextLength)))
    assert.isDefined(checkSample(prompt, { maxTokens: 12, temperature: 1 }, 1, limits(48)))
    const s = await greedy(prompt, 12)
    assert.isAbove(s.tokens.length, 0)
  })

  it("on the inventory env's held-out problems, once it opens a call, names the problem's tool and item, and copies the server's answer", async () => {
    const problems = ITEMS.flatMap((item) => (["stock", "price"] as const).map((ask): Problem => ({ item, ask }))).filter((p) => Env.splitOf(inventory, p) === "eval")
    assert.strictEqual(problems.length, 15)
    let rightCalls = 0
    let copies = 0
    for (const p of problems) {
      const s = await greedy([...promptOf("inventory", p), ...ids("[")], 11, ["]"])
      if (`[${decodeChars(s.tokens)}` === inventoryCall(p)) rightCalls++
      const reply = inventoryReply(inventoryCall(p))
      const t2 = await greedy([...promptOf("inventory", p), ...ids(inventoryCall(p) + reply.observation)], 12)
      if (t2.tokens[t2.tokens.length - 1] === EOS && decodeChars(t2.tokens).trim() === String(reply.result)) copies++
    }
    assert.isAtLeast(rightCalls, 12, "the problem's tool and item on at least 12 of 15 calls")
    assert.isAtLeast(copies, 12, "copies the result on at least 12 of 15 problems")
  })
})
