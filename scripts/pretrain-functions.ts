/**
 * Pretrains the functions env's embedded base model from scratch and writes
 * models/functions (config.json, weights.bin, card.json). `npx tsx
 * scripts/pretrain-functions.ts --help` lists the flags.
 *
 * The model (models/base's architecture: 2 layers, d_model 128, 4 heads, context 48, char
 * tokenizer) learns from a mixture of completions of prompts "f(2)=7,f(3)=10. f(x)=":
 *
 * - the line through the two points (30%): "7+(x-2)*(10-7)" EOS, the program that passes
 *   every test: the sandbox does its arithmetic, the model copies the shown values;
 * - a constant (70%): one of the shown values or a random number, which passes at most
 *   one test in five.
 *
 * So the model writes the program on about 30% of problems, the decision RL has to learn.
 * The prompts come from pairs of shown values, not only from the env's functions (the
 * copying it learns is the skill that transfers), and never from the env's eval split or
 * the validation set: a fixed part of the env's train split, on which the checkpoint is
 * chosen. The eval split (what the runner reports as test/env/...) is measured once, after
 * the choice, for the card.
 */
import { failWith, parseFlags } from "./Flags.ts"
import type { Datum } from "../src/contract/Contract.ts"
import * as Env from "../src/vocabulary/Env.ts"
import { resolveLoss } from "../src/loss/Loss.ts"
import { decodeChars, EOS, VOCAB_SIZE } from "../src/backends/local/CharTokenizer.ts"
import { machine, writeModelFolder } from "./ModelFolder.ts"
import { initTf } from "../src/backends/local/index.ts"
import { baseShapes, cloneWeights, countParams, initBase, LocalModel, type ModelConfig, type Weights } from "../src/backends/local/Model.ts"
import { Rng } from "../src/backends/local/Rng.ts"
import { LocalSamplerEngine } from "../src/backends/local/SamplerEngine.ts"
import { LocalTrainerEngine } from "../src/backends/local/TrainerEngine.ts"
import functions, { f, line, prompt } from "../envs/functions.ts"
import { encode, sequenceDatum } from "./calculator-episodes.ts"
import { adamAt, PRETRAIN_OPTIMIZER } from "./Schedule.ts"
import { shuffled } from "./Shuffle.ts"

const USAGE = `Pretrains the functions env's embedded base model from scratch (models/functions).

usage: npx tsx scripts/pretrain-functions.ts [flags]

  --out <dir>       folder to write config.json, weights.bin, card.json (default: models/functions)
  --seed <n>        initialization and data order (default 1)
  --steps <n>       optimizer steps of 32 sequences (default 600); the learning rate decays
                    linearly over the last 30%
  --help            print this and exit`

const fail = failWith("pretrain-functions")
const flags = parseFlags({ script: "pretrain-functions", usage: USAGE, numeric: ["seed", "steps"], text: ["out"], argv: process.argv.slice(2) })
const args = {
  out: flags.text("out") ?? "models/functions",
  seed: flags.num("seed", 1, (x) => Number.isInteger(x) && x >= 0, "an integer >= 0")!,
  steps: flags.num("steps", 600, (x) => Number.isInteger(x) && x >= 50, "an integer >= 50")!,
}

const settings = {
  seed: args.seed,
  steps: args.steps,
  ...PRETRAIN_OPTIMIZER,
  lineFraction: 0.3,
  /** shown values of the pairs trained on: y2 in [0, 45], y3 in (y2, y2 + 25] */
  pairs: { y2Max: 45, spanMax: 25 },
  validationSize: 12,
  samples: 8,
  candidatesFrom: 0.5,
  candidateEvery: 0.1,
  band: [0.15, 0.45] as const,
  temperature: 1,
  maxTokens: functions.sampling?.maxTokens ?? 20,
}
const config: ModelConfig = { vocabSize: VOCAB_SIZE, contextLength: 48, nLayers: 2, dModel: 128, nHeads: 4, mlpRatio: 4 }

type Problem = { readonly a: number; readonly b: number }
/** A prompt's two shown values. */
type Pair = readonly [number, number]

const pairOf = (p: Problem): Pair => [f(p)(2), f(p)(3)]
const keyOf = ([y2, y3]: Pair) => `${y2},${y3}`
/** A pair as the env's problem would show it: the prompt and the line through it. */
const asProblem = ([y2, y3]: Pair): Problem => ({ a: y3 - y2, b: y2 - 2 * (y3 - y2) })

// ===== Data =====

const splitProblems = () => {
  const all: Array<Problem> = []
  for (let a = 1; a <= 9; a++) for (let b = 0; b <= 9; b++) all.push({ a, b })
  const train = all.filter((p) => Env.splitOf(functions, p) === "train")
  const heldOut = all.filter((p) => Env.splitOf(functions, p) === "eval")
  const validation = shuffled(train, 0).slice(0, settings.validationSize)
  const excluded = new Set([...heldOut, ...validation].map((p) => keyOf(pairOf(p))))
  const pairs: Array<Pair> = []
  for (let y2 = 0; y2 <= settings.pairs.y2Max; y2++) {
    for (let y3 = y2 + 1; y3 <= y2 + settings.pairs.spanMax; y3++) if (!excluded.has(keyOf([y2, y3]))) pairs.push([y2, y3])
  }
  return { train, heldOut, validation, pairs, excluded }
}

/** One training sequence: BOS prompt completion EOS, trained on the completion and EOS. */
const sequence = (pair: Pair, rng: Rng): { readonly datum: Datum; readonly line: boolean } => {
  const p = asProblem(pair)
  const isLine = rng.next() < settings.lineFraction
  const guesses = [pair[0], pair[1], rng.nextU32() % 60]
  const completion = isLine ? line(p) : String(guesses[rng.nextU32() % guesses.length])
  const head = [1, ...encode(prompt(p))]
  const tail = [...encode(completion), EOS]
  return { datum: sequenceDatum({ tokens: [...head, ...tail], weights: [...head.map(() => 0), ...tail.map(() => 1)] }, config.contextLength), line: isLine }
}

// ===== Measurement =====

/** The tests passed (of five) by a completion, read as the sandbox would run these shapes. */
const passed = (p: Problem, text: string): number => {
  const xs = [2, 3, 0, 1, 5]
  const m = /^(-?\d+)\+\(x-2\)\*\((-?\d+)-(-?\d+)\)$/.exec(text)
  const g = m !== undefined && m !== null ? (x: number) => Number(m[1]) + (x - 2) * (Number(m[2]) - Number(m[3])) : /^-?\d+$/.test(text) ? () => Number(text) : undefined
  return g === undefined ? 0 : xs.filter((x) => g(x) === f(p)(x)).length
}

interface Rates {
  /** completions shaped as a line through two points */
  readonly lineRate: number
  /** of those, the line through the shown points */
  readonly copy: number
  /** the mean fraction of tests passed */
  readonly passRate: number
  readonly samples: number
}

const measure = async (weights: Weights, problems: ReadonlyArray<Problem>, seed: number): Promise<Rates> => {
  const model = new LocalModel(config, weights)
  const sampler = new LocalSamplerEngine(model, { seed, prefixCacheSize: 0 })
  let s = seed
  const results = await Promise.all(problems.map((p) =>
    sampler.sample([1, ...encode(prompt(p))], { maxTokens: settings.maxTokens, temperature: settings.temperature, seed: s++ }, { numSamples: settings.samples })
      .then((r) => r.sequences.map((q) => ({ p, text: decodeChars(q.tokens.filter((t) => t !== EOS)) })))
  ))
  sampler.dispose()
  model.dispose()
  const all = results.flat()
  const lines = all.filter((r) => /^-?\d+\+\(x-2\)\*\(-?\d+--?\d+\)$/.test(r.text))
  return {
    lineRate: lines.length / all.length,
    copy: lines.length === 0 ? 0 : lines.filter((r) => r.text === line(r.p)).length / lines.length,
    passRate: all.reduce((n, r) => n + passed(r.p, r.text), 0) / (5 * all.length),
    samples: all.length,
  }
}

const fmt = (r: Rates) => `line ${r.lineRate.toFixed(3)} copy ${r.copy.toFixed(3)} pass ${r.passRate.toFixed(3)} (${r.samples} samples)`

// ===== Training =====

interface Candidate {
  readonly step: number
  readonly weights: Weights
  readonly validation: Rates
}

const train = async (trainer: LocalTrainerEngine, pairs: ReadonlyArray<Pair>, validation: ReadonlyArray<Problem>, t0: number) => {
  const ce = resolveLoss("cross_entropy", {})
  if (!ce.ok) throw new Error(ce.message)
  const rng = new Rng(settings.seed)
  const candidates: Array<Candidate> = []
  const trained = new Set<string>()
  let lines = 0
  let nextCandidate = settings.candidatesFrom
  for (let step = 1; step <= settings.steps; step++) {
    const batch = Array.from({ length: settings.batchSize }, () => {
      const pair = pairs[rng.nextU32() % pairs.length]!
      trained.add(keyOf(pair))
      const s = sequence(pair, rng)
      if (s.line) lines++
      return s.datum
    })
    const out = trainer.run(batch, ce.value, { backward: true })
    trainer.optimStep(adamAt(settings, step, (step - 1) / settings.steps))
    const fraction = step / settings.steps
    if (step % 50 === 0) console.log(`step ${step} wall ${((performance.now() - t0) / 1000).toFixed(0)}s loss ${out.metrics["loss"]!.toFixed(3)}`)
    if (fraction >= nextCandidate) {
      while (nextCandidate <= fraction) nextCandidate += settings.candidateEvery
      const weights = cloneWeights(trainer.params)
      const v = await measure(weights, validation, 1000 + step)
      candidates.push({ step, weights, validation: v })
      console.log(`step ${step} | validation ${fmt(v)}`)
    }
  }
  return { candidates, trained, lines }
}

/** The candidate whose line rate is in the band with the best copy (which RL does not improve); ties go to the later step. */
const choose = (candidates: ReadonlyArray<Candidate>): Candidate => {
  const [lo, hi] = settings.band
  const inBand = candidates.filter((c) => c.validation.lineRate >= lo && c.validation.lineRate <= hi)
  if (inBand.length === 0) fail(`no checkpoint writes the line on [${lo}, ${hi}] of validation samples: ${JSON.stringify(candidates.map((c) => [c.step, c.validation.lineRate]))}; try another --seed or --steps`)
  return inBand.reduce((a, b) => (b.validation.copy >= a.validation.copy ? b : a))
}

const main = async () => {
  await initTf()
  const t0 = performance.now()
  const sets = splitProblems()
  const model = new LocalModel(config, initBase(config, settings.seed))
  const trainer = new LocalTrainerEngine(model, { mode: "full" })
  console.log(`pretraining ${countParams(baseShapes(config))} parameters on ${sets.pairs.length} pairs; validation ${sets.validation.length} problems, eval split ${sets.heldOut.length}`)
  const training = await train(trainer, sets.pairs, sets.validation, t0)
  const chosen = choose(training.candidates)
  const leaked = [...training.trained].filter((k) => sets.excluded.has(k)).length
  if (leaked > 0) throw new Error(`${leaked} trained pairs are those of the eval split or the validation set`)
  const validation = await measure(chosen.weights, sets.validation, 7)
  const heldOut = await measure(chosen.weights, sets.heldOut, 8)
  const wallSeconds = (performance.now() - t0) / 1000
  const card = {
    model: { ...config, parameters: countParams(baseShapes(config)), tokenizer: "char-ascii" },
    settings,
    data: { pairs: sets.pairs.length, pairsTrained: training.trained.size, lineSequences: training.lines, sequences: settings.steps * settings.batchSize },
    selection: `among candidates whose validation line rate is in [${settings.band.join(", ")}], the best copy; ties to the later step`,
    candidates: training.candidates.map((c) => ({ step: c.step, validation: c.validation })),
    chosenStep: chosen.step,
    measured: { validation: { ...validation, note: "re-measured with a fresh seed" }, heldOut: { ...heldOut, note: `the eval split, ${settings.samples} samples per problem; measured after the choice` } },
    wallSeconds: Number(wallSeconds.toFixed(1)),
    machine: machine(),
    command: `npx tsx scripts/pretrain-functions.ts ${process.argv.slice(2).join(" ")}`.trim(),
  }
  await writeModelFolder(args.out, config, chosen.weights, card)
  console.log(`chose step ${chosen.step}\nvalidation ${fmt(validation)}\nheld-out   ${fmt(heldOut)}\nwrote ${args.out} in ${wallSeconds.toFixed(0)} s`)
  trainer.dispose()
  model.dispose()
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
