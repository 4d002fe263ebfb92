/**
 * Pretrains the embedded base model from scratch on the math environment's problems
 * and writes `models/base/` (config.json, weights.bin, card.json).
 *
 *   npm run pretrain                 # defaults below
 *   npx tsx scripts/pretrain.ts --out models/base --seed 1
 *
 * Sequence = BOS ++ prompt ++ reference completion (" 56") ++ EOS; the loss is
 * cross-entropy on the completion and EOS only. The whole model trains with Adam.
 * Every `evalEvery` steps a quick T=1 accuracy (one sample per problem) is measured;
 * once it nears the target band, checkpoints become candidates and are measured with
 * 10 T=1 samples on each of the 300 problems of the runner's eval set (3,000 samples).
 * The saved model is the candidate in [minAcc, maxAcc] closest to the target, so RL
 * starts weak but with signal.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { Effect } from "effect"
import { type Datum, int64, modelInputFromTokens } from "../src/Contract.ts"
import * as Env from "../src/Env.ts"
import { resolveLoss } from "../src/Loss.ts"
import { BOS, EOS, encodeChars, decodeChars, VOCAB_SIZE } from "../src/backends/local/CharTokenizer.ts"
import { saveBaseModel } from "../src/backends/local/Checkpoint.ts"
import { initTf } from "../src/backends/local/index.ts"
import { countParams, baseShapes, initBase, LocalModel, type ModelConfig, type Weights, cloneWeights } from "../src/backends/local/Model.ts"
import { Rng } from "../src/backends/local/Rng.ts"
import { LocalSamplerEngine } from "../src/backends/local/SamplerEngine.ts"
import { LocalTrainerEngine } from "../src/backends/local/TrainerEngine.ts"
import math, { answer } from "../envs/math.ts"

type Problem = { readonly a: number; readonly b: number; readonly op: "plus" | "minus" | "times" }

const args = process.argv.slice(2)
const flag = (name: string, def: number) => {
  const i = args.indexOf(`--${name}`)
  return i >= 0 ? Number(args[i + 1]) : def
}
const outDir = (() => {
  const i = args.indexOf("--out")
  return i >= 0 ? args[i + 1]! : "models/base"
})()

const settings = {
  seed: flag("seed", 1),
  batchSize: flag("batch", 32),
  learningRate: flag("lr", 2e-3),
  warmupSteps: 30,
  beta1: 0.9,
  beta2: 0.99,
  eps: 1e-8,
  gradClipNorm: 1,
  maxSteps: flag("max-steps", 3000),
  evalEvery: flag("eval-every", 25),
  quickEvalSize: 300,
  candidateFrom: flag("candidate-from", 0.2),
  candidateSamples: 10,
  minAcc: 0.25,
  maxAcc: 0.4,
  targetAcc: flag("target", 0.3),
  evalSeed: 0,
}
const config: ModelConfig = { vocabSize: VOCAB_SIZE, contextLength: 48, nLayers: 2, dModel: 128, nHeads: 4, mlpRatio: 4 }

const encode = (text: string): Array<number> => {
  const r = encodeChars(text)
  if (!("ids" in r)) throw new Error(`cannot encode ${JSON.stringify(text)}`)
  return r.ids
}
const promptText = (p: Problem) => math.prompt(p) as string
const referenceText = (p: Problem) => math.reference!(p)

/** problems from the generator's full distribution (both splits), via the env's own source */
const source = math.source
if (source._tag !== "Seeded") throw new Error("envs/math.ts is expected to be a seeded env")
const draw = (i: number): Problem => source.generate({ random: Env.random(`pretrain/${settings.seed}/${i}`), difficulty: 1, index: i }) as Problem

const toDatum = (p: Problem): Datum => {
  const prompt = [BOS, ...encode(promptText(p))]
  const completion = [...encode(referenceText(p)), EOS]
  const tokens = [...prompt, ...completion]
  return {
    modelInput: modelInputFromTokens(tokens),
    lossFnInputs: { target_tokens: int64(tokens.map((t, i) => (i < prompt.length ? -100 : t))) },
  }
}

const isCorrect = (p: Problem, tokens: ReadonlyArray<number>, stop: string) =>
  stop === "stop" && tokens[tokens.length - 1] === EOS && decodeChars(tokens).trim() === String(answer(p))

/** T=1 (or greedy) accuracy of `weights` on `problems`, `samples` each */
const accuracy = async (weights: Weights, problems: ReadonlyArray<Problem>, samples: number, temperature: number, seed: number) => {
  const model = new LocalModel(config, weights)
  const sampler = new LocalSamplerEngine(model, { seed, prefixCacheSize: 0 })
  const results = await Promise.all(
    problems.map((p) => sampler.sample([BOS, ...encode(promptText(p))], { maxTokens: 6, temperature }, { numSamples: samples })),
  )
  let right = 0
  const byOp: Record<string, [number, number]> = { plus: [0, 0], minus: [0, 0], times: [0, 0] }
  results.forEach((r, k) => {
    const p = problems[k]!
    for (const s of r.sequences) {
      const ok = isCorrect(p, s.tokens, s.stopReason)
      right += ok ? 1 : 0
      byOp[p.op]![0] += ok ? 1 : 0
      byOp[p.op]![1] += 1
    }
  })
  sampler.dispose()
  model.dispose()
  const n = problems.length * samples
  return {
    acc: right / n,
    n,
    byOp: Object.fromEntries(Object.entries(byOp).map(([k, [a, b]]) => [k, b === 0 ? 0 : a / b])),
  }
}

const main = async () => {
  await initTf()
  const t0 = performance.now()
  const evalTasks = await Effect.runPromise(Env.evalSet(math, { seed: settings.evalSeed, size: settings.quickEvalSize }))
  const evalProblems = evalTasks.map((t) => t.problem as Problem)
  const distProblems = Array.from({ length: settings.quickEvalSize }, (_, i) => draw(1_000_000 + i))
  const model = new LocalModel(config, initBase(config, settings.seed))
  const trainer = new LocalTrainerEngine(model, { mode: "full" })
  const ce = resolveLoss("cross_entropy", {})
  if (!ce.ok) throw new Error(ce.message)
  console.log(`pretraining ${countParams(baseShapes(config))} parameters, ${JSON.stringify(config)}`)
  console.log(`settings ${JSON.stringify(settings)}`)
  const rng = new Rng(settings.seed)
  let drawn = 0
  const candidates: Array<{ step: number; weights: Weights; acc: number; n: number; byOp: Record<string, number>; quick: number }> = []
  let lossEma = 0
  let trainSeconds = 0
  for (let step = 1; step <= settings.maxSteps; step++) {
    const ts = performance.now()
    const batch = Array.from({ length: settings.batchSize }, () => toDatum(draw(drawn++)))
    const out = trainer.run(batch, ce.value, { backward: true })
    const lr = settings.learningRate * Math.min(1, step / settings.warmupSteps)
    trainer.optimStep({ learning_rate: lr, beta1: settings.beta1, beta2: settings.beta2, eps: settings.eps, weight_decay: 0, grad_clip_norm: settings.gradClipNorm })
    trainSeconds += (performance.now() - ts) / 1000
    lossEma = step === 1 ? out.metrics["loss"]! : 0.9 * lossEma + 0.1 * out.metrics["loss"]!
    if (step % settings.evalEvery !== 0) continue
    const quick = await accuracy(trainer.params, evalProblems, 1, 1, rng.nextU32())
    const wall = (performance.now() - t0) / 1000
    let line = `step ${step} wall ${wall.toFixed(0)}s train ${trainSeconds.toFixed(0)}s loss ${lossEma.toFixed(3)} T=1(300) ${quick.acc.toFixed(3)}`
    if (quick.acc >= settings.candidateFrom) {
      const weights = cloneWeights(trainer.params)
      const full = await accuracy(weights, evalProblems, settings.candidateSamples, 1, rng.nextU32())
      candidates.push({ step, weights, acc: full.acc, n: full.n, byOp: full.byOp, quick: quick.acc })
      line += ` | candidate T=1(${full.n}) ${full.acc.toFixed(3)}`
      if (full.acc > settings.maxAcc + 0.05) {
        console.log(line)
        break
      }
    }
    console.log(line)
  }
  const inBand = candidates.filter((c) => c.acc >= settings.minAcc && c.acc <= settings.maxAcc)
  if (inBand.length === 0) {
    console.error("no candidate landed in the accuracy band; candidates:", candidates.map((c) => [c.step, c.acc]))
    process.exit(1)
  }
  const chosen = inBand.reduce((a, b) => (Math.abs(b.acc - settings.targetAcc) < Math.abs(a.acc - settings.targetAcc) ? b : a))
  // independent re-measurement of the chosen model
  const evalT1 = await accuracy(chosen.weights, evalProblems, settings.candidateSamples, 1, 777)
  const evalGreedy = await accuracy(chosen.weights, evalProblems, 1, 0, 0)
  const distT1 = await accuracy(chosen.weights, distProblems, settings.candidateSamples, 1, 778)
  const wallSeconds = (performance.now() - t0) / 1000
  const card = {
    model: { ...config, parameters: countParams(baseShapes(config)), tokenizer: "char-ascii" },
    data: "envs/math.ts problems at difficulty 1 (a, b in 0..9; plus, minus, times), drawn from the generator's full distribution (both splits); sequence = BOS ++ prompt ++ reference ++ EOS; loss on the reference and EOS only",
    settings,
    chosenStep: chosen.step,
    selection: "T=1 accuracy on the runner's eval set (Env.evalSet seed 0, 300 problems) x 10 samples; candidate in [minAcc, maxAcc] closest to targetAcc",
    candidates: candidates.map((c) => ({ step: c.step, quickT1: c.quick, t1: c.acc, samples: c.n })),
    accuracy: {
      evalSetT1: { value: evalT1.acc, samples: evalT1.n, byOp: evalT1.byOp, note: "re-measured with a fresh seed" },
      evalSetGreedy: { value: evalGreedy.acc, samples: evalGreedy.n },
      distributionT1: { value: distT1.acc, samples: distT1.n, byOp: distT1.byOp, note: "300 fresh draws from the generator x 10" },
      correct: "completion ends with EOS and its text, trimmed, equals the answer",
    },
    wallSeconds,
    trainSeconds,
    machine: "2 cores (shared), Node " + process.version + ", tfjs 4.22 wasm backend",
    command: "npm run pretrain",
  }
  await saveBaseModel(outDir, config, chosen.weights)
  fs.writeFileSync(path.join(outDir, "card.json"), JSON.stringify(card, null, 2) + "\n")
  console.log(`chose step ${chosen.step}: eval-set T=1 ${evalT1.acc.toFixed(3)} (${evalT1.n} samples), greedy ${evalGreedy.acc.toFixed(3)}, distribution T=1 ${distT1.acc.toFixed(3)} (${distT1.n})`)
  console.log(`wrote ${outDir} in ${wallSeconds.toFixed(0)} s`)
  trainer.dispose()
  model.dispose()
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
