/**
 * Pretrains a base model with a 256-token context on the formats of all the shipped envs
 * (math, calculator, words, inventory) and writes models/base-256 (config.json,
 * weights.bin, card.json). `npx tsx scripts/pretrain-mixed.ts --help` lists the flags.
 *
 * The model is models/base's architecture (2 layers, d_model 128, 4 heads, MLP 4x, char
 * tokenizer) with a 256-position context: only the position table grows, so a step over
 * the same sequences costs what it costs on models/base. Each batch draws its sequences
 * from the envs by `mix` weights; `scripts/mixed-data.ts` has the sequences of each env.
 *
 * What it sees: only problems of each env's train split (`Env.splitOf`, as the runner
 * splits). A fixed part of each train split is the validation set, never trained on; the
 * checkpoint is chosen on it. The runner's eval set of each env (`Env.evalSetInfo`, seed
 * 0, what `run` reports as test/env/...) is measured once, after the choice, for the card.
 */
import { parseFlags } from "./Flags.ts"
import { Effect } from "effect"
import type { Datum } from "../src/contract/Contract.ts"
import * as Env from "../src/vocabulary/Env.ts"
import { resolveLoss } from "../src/loss/Loss.ts"
import { VOCAB_SIZE } from "../src/backends/local/CharTokenizer.ts"
import { machine, writeModelFolder } from "./ModelFolder.ts"
import { initTf } from "../src/backends/local/index.ts"
import { baseShapes, cloneWeights, countParams, initBase, LocalModel, type ModelConfig, type Weights } from "../src/backends/local/Model.ts"
import { Rng } from "../src/backends/local/Rng.ts"
import { LocalSamplerEngine } from "../src/backends/local/SamplerEngine.ts"
import { LocalTrainerEngine } from "../src/backends/local/TrainerEngine.ts"
import { sequenceDatum } from "./calculator-episodes.ts"
import { adamAt, PRETRAIN_OPTIMIZER } from "./Schedule.ts"
import { ENVS, type EnvName, envOf, keyOf, type Kind, type Problems, sequenceOf, splits } from "./mixed-data.ts"
import { score, type Score } from "./mixed-episodes.ts"

const USAGE = `Pretrains models/base-256: context 256, on the formats of math, calculator, words and inventory.

usage: npx tsx scripts/pretrain-mixed.ts [flags]

  --out <dir>       folder to write config.json, weights.bin, card.json (default models/base-256)
  --seed <n>        initialization and data order (default 1)
  --steps <n>       optimizer steps of 32 sequences (default 1250); the learning rate decays
                    linearly over the last 30%
  --help            print this and exit

Only train-split problems are used: a fixed part of each env's train split is the validation
set on which the checkpoint is chosen, never trained on; each env's eval set is measured once,
at the end, for card.json.`

const parseArgs = (argv: ReadonlyArray<string>) => {
  const flags = parseFlags({ script: "pretrain-mixed", usage: USAGE, numeric: ["seed", "steps"], text: ["out"], argv })
  return {
    out: flags.text("out") ?? "models/base-256",
    seed: flags.num("seed", 1, (x) => Number.isInteger(x) && x >= 0, "an integer >= 0"),
    steps: flags.num("steps", 1250, (x) => Number.isInteger(x) && x >= 50, "an integer >= 50"),
  }
}

const args = parseArgs(process.argv.slice(2))

const settings = {
  seed: args.seed,
  steps: args.steps,
  ...PRETRAIN_OPTIMIZER,
  mix: { math: 0.25, calculator: 0.3, words: 0.2, inventory: 0.25 } as Record<EnvName, number>,
  toolFraction: 0.3,
  answerWeight: 4,
  guess: { offsetFraction: 0.5, maxOffset: 10 },
  validationSize: { math: 25, calculator: 300, words: 300, inventory: 12 } as Record<EnvName, number>,
  validationSeed: 0,
  validationSamples: { math: 8, calculator: 2, words: 1, inventory: 10 } as Record<EnvName, number>,
  candidatesFrom: 0.5,
  candidateEvery: 0.1,
  heldOutSeed: 0,
  heldOutSamples: { math: 10, calculator: 2, words: 2, inventory: 10 } as Record<EnvName, number>,
  temperature: 1,
}
const config: ModelConfig = { vocabSize: VOCAB_SIZE, contextLength: 256, nLayers: 2, dModel: 128, nHeads: 4, mlpRatio: 4 }

type Scores = Record<EnvName, Score>

/** Every env's score of `weights` on its problems in `sets`. */
const measure = async (weights: Weights, sets: Problems, samples: Record<EnvName, number>, seed: number): Promise<Scores> => {
  const model = new LocalModel(config, weights)
  const sampler = new LocalSamplerEngine(model, { seed, prefixCacheSize: 0 })
  const out: Partial<Scores> = {}
  for (const name of ENVS) out[name] = await score(sampler, name, sets[name], samples[name], seed * 7919 + ENVS.indexOf(name) * 100_003)
  sampler.dispose()
  model.dispose()
  return out as Scores
}

const meanAccuracy = (s: Scores) => ENVS.reduce((a, n) => a + s[n].accuracy, 0) / ENVS.length

const fmt = (s: Scores) =>
  ENVS.map((n) => `${n} ${s[n].accuracy.toFixed(3)}${s[n].callRate !== undefined ? ` (call ${s[n].callRate!.toFixed(2)} copy ${s[n].copy!.toFixed(2)})` : ""}`).join(", ")

const round = (s: Scores) =>
  Object.fromEntries(ENVS.map((n) => [n, Object.fromEntries(Object.entries(s[n]).map(([k, v]) => [k, Number.isInteger(v) ? v : Number(v.toFixed(4))]))]))

/** The runner's eval set of each env (seed 0, the env's eval.size). */
const heldOutSets = async (): Promise<{ sets: Problems; exhausted: Record<EnvName, boolean> }> => {
  const sets: Partial<Record<EnvName, ReadonlyArray<unknown>>> = {}
  const exhausted: Partial<Record<EnvName, boolean>> = {}
  for (const name of ENVS) {
    const info = await Effect.runPromise(Env.evalSetInfo(envOf[name], { seed: settings.heldOutSeed }).pipe(Effect.mapError((e) => new Error(e.message))) as Effect.Effect<{ tasks: ReadonlyArray<Env.Task<unknown>>; exhausted: boolean }, Error>)
    sets[name] = info.tasks.map((t) => t.problem)
    exhausted[name] = info.exhausted
  }
  return { sets: sets as unknown as Problems, exhausted: exhausted as Record<EnvName, boolean> }
}

interface Candidate {
  readonly step: number
  readonly trainSeconds: number
  readonly weights: Weights
  readonly validation: Scores
  readonly lossEma: number
}

/** Trains for the step budget; returns the candidates measured on the validation set and what was drawn. */
const train = async (split: ReturnType<typeof splits>, t0: number) => {
  const model = new LocalModel(config, initBase(config, settings.seed))
  const trainer = new LocalTrainerEngine(model, { mode: "full" })
  const ce = resolveLoss("cross_entropy", {})
  if (!ce.ok) throw new Error(ce.message)
  const rng = new Rng(settings.seed)
  const trained = new Set<string>()
  const counts: Record<string, number> = {}
  const candidates: Array<Candidate> = []
  const cumulative = ENVS.map((n, i) => ENVS.slice(0, i + 1).reduce((a, m) => a + settings.mix[m], 0))
  let lossEma = 0
  let trainSeconds = 0
  let nextCandidate = settings.candidatesFrom
  for (let step = 1; step <= settings.steps; step++) {
    const batch: Array<Datum> = []
    for (let i = 0; i < settings.batchSize; i++) {
      const u = rng.next() * cumulative[cumulative.length - 1]!
      const name = ENVS[Math.min(ENVS.length - 1, cumulative.findIndex((c) => u < c))]!
      const pool = split.pool[name]
      const p = pool[rng.nextU32() % pool.length]!
      trained.add(`${name}:${keyOf(p)}`)
      const { seq, kind } = sequenceOf(name, p, rng, settings)
      counts[`${name}/${kind satisfies Kind}`] = (counts[`${name}/${kind}`] ?? 0) + 1
      batch.push(sequenceDatum(seq, config.contextLength))
    }
    const ts = performance.now()
    const out = trainer.run(batch, ce.value, { backward: true })
    const adam = adamAt(settings, step, (step - 1) / settings.steps)
    trainer.optimStep(adam)
    trainSeconds += (performance.now() - ts) / 1000
    lossEma = step === 1 ? out.metrics["loss"]! : 0.95 * lossEma + 0.05 * out.metrics["loss"]!
    const f = step / settings.steps
    const line = `step ${step} train ${trainSeconds.toFixed(0)}s wall ${((performance.now() - t0) / 1000).toFixed(0)}s loss ${lossEma.toFixed(3)} lr ${adam.learningRate.toExponential(2)}`
    if (f + 1e-9 >= nextCandidate || step === settings.steps) {
      while (nextCandidate <= f + 1e-9) nextCandidate += settings.candidateEvery
      const weights = cloneWeights(trainer.params)
      const validation = await measure(weights, split.validation, settings.validationSamples, 1000 + step)
      candidates.push({ step, trainSeconds, weights, validation, lossEma })
      console.log(`${line} | validation ${fmt(validation)}, mean ${meanAccuracy(validation).toFixed(3)}`)
    } else if (step % 50 === 0) console.log(line)
  }
  trainer.dispose()
  model.dispose()
  return { candidates, trained, counts, trainSeconds }
}

const main = async () => {
  await initTf()
  const t0 = performance.now()
  const split = splits(settings.validationSize, settings.validationSeed)
  const held = await heldOutSets()
  for (const name of ENVS) {
    const inPool = new Set(split.pool[name].map(keyOf))
    const clash = [...split.validation[name], ...held.sets[name]].filter((p) => inPool.has(keyOf(p))).length
    if (clash > 0) throw new Error(`${name}: ${clash} validation or eval problems are in the training pool`)
  }
  console.log(`pretraining ${countParams(baseShapes(config))} parameters, ${JSON.stringify(config)}`)
  console.log(`settings ${JSON.stringify(settings)}`)
  console.log(ENVS.map((n) => `${n}: train split ${split.sizes[n].train} (validation ${split.validation[n].length}), eval split ${split.sizes[n].eval}, eval set ${held.sets[n].length}`).join("; "))

  const { candidates, trained, counts, trainSeconds } = await train(split, t0)
  // the candidate with the highest mean validation accuracy over the envs; ties to the later step
  const chosen = candidates.reduce((a, b) => (meanAccuracy(b.validation) >= meanAccuracy(a.validation) ? b : a))

  // measured once, after the choice, never used for it
  const finalValidation = await measure(chosen.weights, split.validation, settings.validationSamples, 7)
  const heldOut = await measure(chosen.weights, held.sets, settings.heldOutSamples, 8)
  const leaked = ENVS.reduce((a, n) => a + [...split.validation[n], ...held.sets[n]].filter((p) => trained.has(`${n}:${keyOf(p)}`)).length, 0)
  if (leaked > 0) throw new Error(`${leaked} trained problems are in a validation or eval set`)
  const wallSeconds = (performance.now() - t0) / 1000

  const card = {
    model: { ...config, parameters: countParams(baseShapes(config)), tokenizer: "char-ascii" },
    envs: [...ENVS],
    data: {
      problems: Object.fromEntries(
        ENVS.map((n) => [n, `train split ${split.sizes[n].train} problems (Env.splitOf); ${split.validation[n].length} of them (seeded shuffle, seed ${settings.validationSeed}) the validation set, never trained on; eval split ${split.sizes[n].eval}, never trained on or used for selection`]),
      ),
      mix: settings.mix,
      sequences: {
        math: "BOS prompt reference EOS; weight 1 on the reference and EOS",
        words: "BOS prompt reference EOS; weight 1 on the reference and EOS",
        calculator: `${settings.toolFraction}: BOS prompt "[47+38]" "=85;" " 85" EOS (call 1, observation 0, answer and EOS ${settings.answerWeight}); else a wrong direct guess, weight 1`,
        inventory: `${settings.toolFraction}: BOS prompt "[price lamp]" "=42;" " 42" EOS from envs/mcp/inventory-data.ts (call 1, observation 0, answer and EOS ${settings.answerWeight}); else a wrong direct guess, weight 1`,
        drawn: counts,
      },
      distinctTrained: trained.size,
      loss: "cross_entropy with per-token weights (pooled mean over trained positions)",
    },
    settings,
    steps: settings.steps,
    trainSeconds: Number(trainSeconds.toFixed(1)),
    episode: "as the runner samples it, T=1 (scripts/mixed-episodes.ts): math 6 tokens, words 8; calculator turn 1 stops at \"]\" (8 tokens), turn 2 6 tokens; inventory turns of 12 tokens, turn 1 stops at \"]\"; correct: the final turn ends with EOS and, trimmed, is the answer",
    selection: `candidates every ${settings.candidateEvery * 100}% of the steps from ${settings.candidatesFrom * 100}% on, measured on the validation sets; chosen: the highest mean accuracy over the four envs, ties to the later step`,
    candidates: candidates.map((c) => ({ step: c.step, trainSeconds: Number(c.trainSeconds.toFixed(1)), loss: Number(c.lossEma.toFixed(4)), mean: Number(meanAccuracy(c.validation).toFixed(4)), validation: round(c.validation) })),
    chosenStep: chosen.step,
    measured: {
      validation: { ...round(finalValidation), note: "the chosen checkpoint re-measured with a fresh seed" },
      heldOut: {
        ...round(heldOut),
        note: `each env's runner eval set (Env.evalSetInfo seed ${settings.heldOutSeed}, the env's eval.size; whole eval split for ${ENVS.filter((n) => held.exhausted[n]).join(", ")}), x heldOutSamples episodes; measured after the choice`,
      },
    },
    wallSeconds: Number(wallSeconds.toFixed(1)),
    machine: machine(),
    command: `npx tsx scripts/pretrain-mixed.ts ${process.argv.slice(2).join(" ")}`.trim(),
  }
  await writeModelFolder(args.out, config, chosen.weights, card)
  console.log(`chose step ${chosen.step}`)
  console.log(`validation ${fmt(finalValidation)}`)
  console.log(`held-out   ${fmt(heldOut)}`)
  console.log(`wrote ${args.out} in ${wallSeconds.toFixed(0)} s`)
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
