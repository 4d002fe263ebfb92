/**
 * How `scripts/pretrain-mixed.ts` measures a checkpoint on each env, sampling as the runner
 * does (temperature 1, the env's token limits):
 *
 *   math, words   one turn from BOS ++ prompt; correct when it ends with EOS and its text,
 *                 trimmed, is the answer
 *   calculator    `sampleEpisodes` of `calculator-episodes.ts` (call, observation, answer)
 *   inventory     turn 1 stops at "]" or EOS (12 tokens at most); a call "[price lamp]" gets
 *                 the server's answer "=42;" (from its data module; an unknown item or tool
 *                 gets "=error: ...;" as the server's error would), then turn 2 (12 tokens);
 *                 correct when the final turn ends with EOS and, trimmed, is the answer
 */
import { decodeChars, EOS } from "../src/backends/local/CharTokenizer.ts"
import type { LocalSamplerEngine } from "../src/backends/local/SamplerEngine.ts"
import { answer as inventoryAnswer, type Problem as InventoryProblem } from "../envs/inventory.ts"
import { ITEMS, priceOf, stockOf } from "../envs/mcp/inventory-data.ts"
import type { Problem as CalcProblem } from "../envs/calculator.ts"
import { encode, parseAnswer, rates, sampleEpisodes } from "./calculator-episodes.ts"
import { type EnvName, inventoryObservation, type Problems, promptOf, referenceOf } from "./mixed-data.ts"

export interface Score {
  readonly problems: number
  readonly episodes: number
  /** correct episodes / episodes */
  readonly accuracy: number
  /** tool envs: well-formed calls / episodes */
  readonly callRate?: number
  /** tool envs: final answer equal to the observed result / well-formed calls */
  readonly copy?: number
}

export const INVENTORY_TURN = { maxTokens: 12, stop: ["]"] } as const
const SINGLE_MAX_TOKENS = { math: 6, words: 8 } as const

const endsWithEos = (s: { readonly tokens: ReadonlyArray<number>; readonly stopReason: string }) => s.stopReason === "stop" && s.tokens[s.tokens.length - 1] === EOS

const single = async (sampler: LocalSamplerEngine, name: "math" | "words", problems: ReadonlyArray<unknown>, samples: number, seed: number): Promise<Score> => {
  const results = await Promise.all(
    problems.map((p, k) => sampler.sample(promptOf(name, p), { maxTokens: SINGLE_MAX_TOKENS[name], temperature: 1, seed: seed + k }, { numSamples: samples })),
  )
  let right = 0
  results.forEach((r, k) => {
    for (const s of r.sequences) if (endsWithEos(s) && decodeChars(s.tokens).trim() === referenceOf(name, problems[k])) right++
  })
  return { problems: problems.length, episodes: problems.length * samples, accuracy: right / (problems.length * samples) }
}

/** What the inventory server answers to a bracket call's text, as an observation. */
export const inventoryReply = (turn: string): { readonly observation: string; readonly result?: number } => {
  const m = /^\[(\S+)(?: (.*))?\]$/.exec(turn)
  if (m === null) return { observation: "=error: the call has no closing ];" }
  const [tool, item = ""] = [m[1]!, (m[2] ?? "").trim()]
  if (tool !== "stock" && tool !== "price") return { observation: `=error: no tool ${tool.slice(0, 12)};` }
  if (!(ITEMS as ReadonlyArray<string>).includes(item)) return { observation: `=error: no ${item.slice(0, 12)};` }
  const result = tool === "stock" ? stockOf(item) : priceOf(item)
  return { observation: inventoryObservation(result), result }
}

const inventoryEpisodes = async (sampler: LocalSamplerEngine, problems: ReadonlyArray<InventoryProblem>, samples: number, seed: number): Promise<Score> => {
  let s0 = seed
  const first = await Promise.all(
    problems.map((p) => sampler.sample(promptOf("inventory", p), { maxTokens: INVENTORY_TURN.maxTokens, temperature: 1, stop: [...INVENTORY_TURN.stop], seed: s0++ }, { numSamples: samples })),
  )
  let right = 0
  let calls = 0
  let copies = 0
  const pending: Array<Promise<void>> = []
  first.forEach((r, k) => {
    const p = problems[k]!
    for (const s of r.sequences) {
      const turn1 = decodeChars(s.tokens)
      if (!turn1.startsWith("[")) {
        if (endsWithEos(s) && parseAnswer(turn1) === inventoryAnswer(p)) right++
        continue
      }
      const reply = inventoryReply(turn1)
      if (reply.result !== undefined) calls++
      const prompt = [...promptOf("inventory", p), ...s.tokens, ...encode(reply.observation)]
      pending.push(
        sampler.sample(prompt, { maxTokens: INVENTORY_TURN.maxTokens, temperature: 1, seed: s0++ }, { numSamples: 1 }).then((r2) => {
          const t = r2.sequences[0]!
          const final = endsWithEos(t) ? parseAnswer(decodeChars(t.tokens)) : undefined
          if (final === inventoryAnswer(p)) right++
          if (reply.result !== undefined && final === reply.result) copies++
        }),
      )
    }
  })
  await Promise.all(pending)
  const n = problems.length * samples
  return { problems: problems.length, episodes: n, accuracy: right / n, callRate: calls / n, copy: calls === 0 ? 0 : copies / calls }
}

/** The score of the sampler's model on `problems` of env `name`, `samples` episodes each. */
export const score = async (sampler: LocalSamplerEngine, name: EnvName, problems: Problems[EnvName], samples: number, seed: number): Promise<Score> => {
  if (name === "math" || name === "words") return single(sampler, name, problems, samples, seed)
  if (name === "inventory") return inventoryEpisodes(sampler, problems as ReadonlyArray<InventoryProblem>, samples, seed)
  const calc = problems as ReadonlyArray<CalcProblem>
  const r = rates(await sampleEpisodes(sampler, calc, { samples, temperature: 1, seed }), calc.length)
  return { problems: calc.length, episodes: r.episodes, accuracy: r.accuracy, callRate: r.callRate, copy: r.copy }
}
