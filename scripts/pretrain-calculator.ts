/**
 * Pretrains the calculator env's embedded base model from scratch and writes
 * models/calculator (config.json, weights.bin, card.json). `npx tsx
 * scripts/pretrain-calculator.ts --help` lists the flags.
 *
 * The model (2 layers, d_model 128, 4 heads, context 48, char tokenizer: the
 * architecture of models/base) learns from a mixture of traces:
 *
 * - tool traces (30%): BOS prompt "[47+38]" "=85;" " 85" EOS. Loss on the call
 *   (weight 1), not on the observation (weight 0), on the answer and EOS with weight 4:
 *   two layers copy a three-character result back badly at weight 1;
 * - wrong direct guesses (70%): BOS prompt " 79" EOS (the answer plus a small offset,
 *   or a random number in the operation's range), weight 1.
 *
 * So the model calls the tool on about 30% of problems and copies its result, and every
 * direct answer is wrong: its accuracy is about its call rate, the decision RL has to
 * learn.
 *
 * What it sees: only problems of the env's train split (`Env.splitOf(calculator, p) ===
 * "train"`, 21,870 problems). 500 of them, fixed by a seeded shuffle, are a validation
 * set never trained on; checkpoints are chosen on it. The eval split (what the runner
 * reports as test/env/...) is measured once, after the choice, for the card.
 */
import { failWith, parseFlags } from "./Flags.ts"
import type { Datum } from "../src/contract/Contract.ts"
import { type ResolvedLoss, resolveLoss } from "../src/loss/Loss.ts"
import { VOCAB_SIZE } from "../src/backends/local/CharTokenizer.ts"
import { machine, writeModelFolder } from "./ModelFolder.ts"
import { initTf } from "../src/backends/local/index.ts"
import { baseShapes, cloneWeights, countParams, initBase, LocalModel, type ModelConfig, type Weights } from "../src/backends/local/Model.ts"
import { Rng } from "../src/backends/local/Rng.ts"
import { LocalSamplerEngine } from "../src/backends/local/SamplerEngine.ts"
import { LocalTrainerEngine } from "../src/backends/local/TrainerEngine.ts"
import calculator, { type Problem } from "../envs/calculator.ts"
import { calculatorSequence, ERROR_OBSERVATION, evalSplit, type EpisodeRates, rates, sampleEpisodes, sequenceDatum, trainSplit, TURN1, TURN2 } from "./calculator-episodes.ts"
import { adamAt, PRETRAIN_OPTIMIZER } from "./Schedule.ts"
import { shuffled } from "./Shuffle.ts"

const USAGE = `Pretrains the calculator env's embedded base model from scratch (models/calculator).

usage: npx tsx scripts/pretrain-calculator.ts [flags]

  --out <dir>       folder to write config.json, weights.bin, card.json
                    (default: models/calculator)
  --seed <n>        initialization and data order (default 1)
  --steps <n>       optimizer steps of 32 sequences (default 720, about 240 s of training
                    on 2 unshared cores); the learning rate decays linearly over the last
                    30%. A step budget makes the run the same whatever the machine's load
  --seconds <n>     a training time budget instead of --steps (evaluation not counted);
                    the schedule then follows the time spent, so the result depends on
                    the machine's speed
  --help            print this and exit

Only train-split problems are used: 500 of them (fixed) are the validation set on which
the checkpoint is chosen and are never trained on; the eval split is measured once, at the
end, for card.json.`

// ===== Flags =====

const fail = failWith("pretrain-calculator")

const parseArgs = (argv: ReadonlyArray<string>) => {
  if (argv.includes("--seconds") && argv.includes("--steps")) fail("give --steps or --seconds, not both")
  const flags = parseFlags({ script: "pretrain-calculator", usage: USAGE, numeric: ["seed", "seconds", "steps"], text: ["out"], argv })
  const num = flags.num
  return {
    out: flags.text("out") ?? "models/calculator",
    seed: num("seed", 1, (x) => Number.isInteger(x) && x >= 0, "an integer >= 0")!,
    seconds: num("seconds", undefined, (x) => x >= 10, "a number of seconds >= 10"),
    steps: num("steps", undefined, (x) => Number.isInteger(x) && x >= 50, "an integer >= 50"),
  }
}

const args = parseArgs(process.argv.slice(2))

// ===== Settings =====

const settings = {
  seed: args.seed,
  budget: (args.seconds !== undefined ? { trainSeconds: args.seconds } : { steps: args.steps ?? 720 }) as { readonly steps: number } | { readonly trainSeconds: number },
  ...PRETRAIN_OPTIMIZER,
  toolFraction: 0.3,
  answerWeight: 4,
  guess: { offsetFraction: 0.5, maxOffset: 10 },
  validationSize: 500,
  validationSeed: 0,
  validationSamples: 2,
  candidatesFrom: 0.6,
  candidateEvery: 0.1,
  band: [0.2, 0.4] as const,
  heldOutSamples: 1,
  temperature: 1,
  turn1: TURN1,
  turn2: TURN2,
  errorObservation: ERROR_OBSERVATION,
}
const config: ModelConfig = { vocabSize: VOCAB_SIZE, contextLength: 48, nLayers: 2, dModel: 128, nHeads: 4, mlpRatio: 4 }

const fmt = (r: EpisodeRates) =>
  `call ${r.callRate.toFixed(3)} operands ${r.rightOperands.toFixed(3)} copy ${r.copy.toFixed(3)} acc ${r.accuracy.toFixed(3)} (direct ${r.directRate.toFixed(3)}, other ${r.otherRate.toFixed(3)}, ${r.episodes} episodes)`

const round = (r: EpisodeRates) =>
  Object.fromEntries(Object.entries(r).map(([k, v]) => [k, Number.isInteger(v) ? v : Number(v.toFixed(4))])) as unknown as EpisodeRates

const key = (p: Problem) => `${p.a}${p.op}${p.b}`

// ===== Steps =====

interface Sets {
  /** the env's train split */
  readonly train: ReadonlyArray<Problem>
  /** the env's eval split: measured once, at the end */
  readonly heldOut: ReadonlyArray<Problem>
  /** a fixed part of the train split, never trained on: checkpoint selection */
  readonly validation: ReadonlyArray<Problem>
  /** the rest of the train split: what training draws from */
  readonly pool: ReadonlyArray<Problem>
}

/** Splits the problems; fails if the training pool overlaps the eval split or the validation set. */
const splitProblems = (): Sets => {
  const train = trainSplit()
  const heldOut = evalSplit()
  const order = shuffled(train, settings.validationSeed)
  const validation = order.slice(0, settings.validationSize)
  const pool = order.slice(settings.validationSize)
  const heldOutKeys = new Set(heldOut.map(key))
  const validationKeys = new Set(validation.map(key))
  if (pool.some((p) => heldOutKeys.has(key(p)) || validationKeys.has(key(p)))) throw new Error("the training pool overlaps the eval split or the validation set")
  return { train, heldOut, validation, pool }
}

/** The episode rates of `weights` on `problems`, `samples` episodes each. */
const measure = async (weights: Weights, problems: ReadonlyArray<Problem>, samples: number, seed: number) => {
  const model = new LocalModel(config, weights)
  const sampler = new LocalSamplerEngine(model, { seed, prefixCacheSize: 0 })
  const episodes = await sampleEpisodes(sampler, problems, { samples, temperature: settings.temperature, seed })
  sampler.dispose()
  model.dispose()
  return rates(episodes, problems.length)
}

interface Candidate {
  readonly step: number
  readonly trainSeconds: number
  readonly weights: Weights
  readonly validation: EpisodeRates
  readonly lossEma: number
}

interface Drawn {
  /** keys of the problems trained on */
  readonly trainedKeys: Set<string>
  toolTraces: number
  guesses: number
}

/** One batch from the training pool: tool traces and wrong direct guesses, by `settings`. */
const drawBatch = (pool: ReadonlyArray<Problem>, rng: Rng, drawn: Drawn): Array<Datum> => {
  const batch: Array<Datum> = []
  for (let i = 0; i < settings.batchSize; i++) {
    const p = pool[rng.nextU32() % pool.length]!
    drawn.trainedKeys.add(key(p))
    const { seq, kind } = calculatorSequence(p, rng, settings)
    if (kind === "toolTrace") drawn.toolTraces++
    else drawn.guesses++
    batch.push(sequenceDatum(seq, config.contextLength))
  }
  return batch
}

/**
 * Trains until the budget is spent; from `candidatesFrom` of the budget on, every
 * `candidateEvery` of it, the weights are a candidate measured on the validation set.
 */
const train = async (trainer: LocalTrainerEngine, loss: ResolvedLoss, sets: Sets, t0: number) => {
  const rng = new Rng(settings.seed)
  const drawn: Drawn = { trainedKeys: new Set<string>(), toolTraces: 0, guesses: 0 }
  const candidates: Array<Candidate> = []
  let lossEma = 0
  let trainSeconds = 0
  let nextCandidate = settings.candidatesFrom
  let step = 0
  /** the fraction of the budget spent before the current step */
  const progress = () => ("steps" in settings.budget ? (step - 1) / settings.budget.steps : trainSeconds / settings.budget.trainSeconds)
  for (;;) {
    step++
    const batch = drawBatch(sets.pool, rng, drawn)
    const before = progress()
    const ts = performance.now()
    const out = trainer.run(batch, loss, { backward: true })
    const adam = adamAt(settings, step, before)
    trainer.optimStep(adam)
    trainSeconds += (performance.now() - ts) / 1000
    lossEma = step === 1 ? out.metrics["loss"]! : 0.95 * lossEma + 0.05 * out.metrics["loss"]!
    const f = "steps" in settings.budget ? step / settings.budget.steps : trainSeconds / settings.budget.trainSeconds
    const last = f >= 1
    if (step % 50 === 0 && f < nextCandidate && !last) {
      console.log(`step ${step} train ${trainSeconds.toFixed(0)}s wall ${((performance.now() - t0) / 1000).toFixed(0)}s loss ${lossEma.toFixed(3)} lr ${adam.learningRate.toExponential(2)}`)
    }
    if (f >= nextCandidate || last) {
      while (nextCandidate <= f) nextCandidate += settings.candidateEvery
      const weights = cloneWeights(trainer.params)
      const v = await measure(weights, sets.validation, settings.validationSamples, 1000 + step)
      candidates.push({ step, trainSeconds, weights, validation: v, lossEma })
      console.log(`step ${step} train ${trainSeconds.toFixed(0)}s wall ${((performance.now() - t0) / 1000).toFixed(0)}s loss ${lossEma.toFixed(3)} | validation ${fmt(v)}`)
    }
    if (last) break
  }
  return { candidates, drawn, trainSeconds, steps: step }
}

/**
 * The candidate in the band with the best tool success (accuracy / call rate: right
 * operands and copy, which RL cannot fix); ties go to the later step. Exits if none is
 * in the band.
 */
const choose = (candidates: ReadonlyArray<Candidate>): Candidate => {
  const [lo, hi] = settings.band
  const inBand = candidates.filter((c) => c.validation.accuracy >= lo && c.validation.accuracy <= hi)
  if (inBand.length === 0) {
    console.error(`pretrain-calculator: no checkpoint has validation accuracy in [${lo}, ${hi}]; candidates (step, accuracy): ${JSON.stringify(candidates.map((c) => [c.step, c.validation.accuracy]))}`)
    console.error("try another --seed or more --steps")
    process.exit(1)
  }
  const success = (r: EpisodeRates) => (r.callRate === 0 ? 0 : r.accuracy / r.callRate)
  return inBand.reduce((a, b) => (success(b.validation) >= success(a.validation) ? b : a))
}

/** card.json: the model, its data, how the checkpoint was chosen and what it measured. */
const cardOf = (run: {
  readonly sets: Sets
  readonly training: Awaited<ReturnType<typeof train>>
  readonly chosen: Candidate
  readonly finalValidation: EpisodeRates
  readonly finalHeldOut: EpisodeRates
  readonly wallSeconds: number
}) => {
  const { sets: { train, heldOut, validation, pool }, training: { candidates, drawn, trainSeconds, steps }, chosen } = run
  const [lo, hi] = settings.band
  return {
    model: { ...config, parameters: countParams(baseShapes(config)), tokenizer: "char-ascii" },
    env: calculator.name,
    data: {
      problems:
        `train split only (Env.splitOf(calculator, p) === "train": ${train.length} of 24,300 problems); ${validation.length} of them ` +
        `(seeded shuffle, seed ${settings.validationSeed}) are the validation set and are never trained on; training draws uniformly, ` +
        `with replacement, from the other ${pool.length}; ${drawn.trainedKeys.size} distinct problems were drawn`,
      mix: {
        toolTrace: `${settings.toolFraction}: BOS prompt callText observationText(answer) answerText EOS; weight 1 on the call, 0 on the observation, ${settings.answerWeight} on the answer and EOS`,
        wrongDirectGuess: `${(1 - settings.toolFraction).toFixed(1)}: BOS prompt " <wrong>" EOS, weight 1; <wrong> is the answer +/- 1..${settings.guess.maxOffset} (half) or uniform in the operation's answer range (half), never the answer`,
        sequences: { toolTraces: drawn.toolTraces, wrongGuesses: drawn.guesses },
      },
      loss: "cross_entropy with per-token weights (pooled mean over trained positions)",
      evalSplit: `the ${heldOut.length} problems of the eval split (eval.heldOut ${calculator.eval?.heldOut ?? 0.1}) are never trained on or used for selection`,
    },
    settings,
    steps,
    trainSeconds,
    episode:
      `as the runner samples it, T=${settings.temperature}: turn 1 from BOS+prompt, stop "]" or EOS, max ${TURN1.maxTokens} tokens; a call "[a<op>b]" ` +
      `gets the observation "=<a op b>;" of the operands as written ("${ERROR_OBSERVATION}" if the bracketed text does not parse), then turn 2, ` +
      `stop EOS, max ${TURN2.maxTokens} tokens. Correct: the final turn ends with EOS and, trimmed, is the answer. callRate: well-formed calls / episodes; ` +
      `rightOperands and copy: / well-formed calls; copy: final answer equals the observed result`,
    selection:
      `candidates every ${settings.candidateEvery * 100}% of the budget from ${settings.candidatesFrom * 100}% on, measured on the validation set ` +
      `(${validation.length} train-split problems x ${settings.validationSamples} episodes); chosen: among candidates with validation accuracy in ` +
      `[${lo}, ${hi}], the highest accuracy / callRate (right operands x copy, what RL does not fix), ties to the later step`,
    candidates: candidates.map((c) => ({ step: c.step, trainSeconds: Number(c.trainSeconds.toFixed(1)), loss: Number(c.lossEma.toFixed(4)), validation: round(c.validation) })),
    chosenStep: chosen.step,
    measured: {
      validation: { ...round(run.finalValidation), note: "the chosen checkpoint re-measured with a fresh seed" },
      heldOut: { ...round(run.finalHeldOut), note: `the whole eval split, ${settings.heldOutSamples} episode per problem; measured after the choice` },
    },
    wallSeconds: Number(run.wallSeconds.toFixed(1)),
    machine: machine(),
    command: `npx tsx scripts/pretrain-calculator.ts ${process.argv.slice(2).join(" ")}`.trim(),
  }
}

const main = async () => {
  await initTf()
  const t0 = performance.now()
  const sets = splitProblems()
  const model = new LocalModel(config, initBase(config, settings.seed))
  const trainer = new LocalTrainerEngine(model, { mode: "full" })
  const ce = resolveLoss("cross_entropy", {})
  if (!ce.ok) throw new Error(ce.message)
  console.log(`pretraining ${countParams(baseShapes(config))} parameters, ${JSON.stringify(config)}`)
  console.log(`settings ${JSON.stringify(settings)}`)
  console.log(`train split ${sets.train.length} problems: ${sets.validation.length} validation, ${sets.pool.length} in the training pool; eval split ${sets.heldOut.length} (not used until the end)`)

  const training = await train(trainer, ce.value, sets, t0)
  const chosen = choose(training.candidates)

  // Measured once, after the choice, never used for it.
  const finalValidation = await measure(chosen.weights, sets.validation, settings.validationSamples, 7)
  const finalHeldOut = await measure(chosen.weights, sets.heldOut, settings.heldOutSamples, 8)
  const wasTrained = (p: Problem) => training.drawn.trainedKeys.has(key(p))
  const leaked = sets.heldOut.filter(wasTrained).length + sets.validation.filter(wasTrained).length
  if (leaked > 0) throw new Error(`${leaked} trained problems are in the eval split or the validation set`)
  const wallSeconds = (performance.now() - t0) / 1000

  const card = cardOf({ sets, training, chosen, finalValidation, finalHeldOut, wallSeconds })
  await writeModelFolder(args.out, config, chosen.weights, card)
  console.log(`chose step ${chosen.step}`)
  console.log(`validation ${fmt(finalValidation)}`)
  console.log(`held-out   ${fmt(finalHeldOut)}`)
  console.log(`wrote ${args.out} in ${wallSeconds.toFixed(0)} s`)
  trainer.dispose()
  model.dispose()
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
