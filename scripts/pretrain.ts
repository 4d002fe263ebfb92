/**
 * Pretrains the embedded base model from scratch on an environment's training problems
 * and writes a model folder (config.json, weights.bin, card.json). `npx tsx
 * scripts/pretrain.ts --help` lists the flags.
 *
 * Sequence = BOS ++ prompt ++ reference completion (" 56") ++ EOS; the loss is
 * cross-entropy on the completion and EOS only. The whole model trains with Adam.
 *
 * What it sees: only problems of the env's train split (`Env.problemAt(..., split:
 * "train")`); the eval split, which the runner reports as `test/env/...`, is never
 * trained on and never used to choose the checkpoint. It is measured once, at the end,
 * for the card.
 *
 * Checkpoint selection: every `evalEvery` steps a quick T=1 accuracy (one sample per
 * problem) is measured on the selection set, which is up to 300 distinct problems of
 * the train split (for math at difficulty 1: all 225 training facts). Once it nears the
 * target band, checkpoints become candidates (every `candidateEvery` steps from then
 * on), measured with 10 T=1 samples per problem.
 * The saved model is the candidate in [minAcc, maxAcc] closest to the target, so RL
 * starts weak but with signal on the problems it trains on.
 */
import { failWith, parseFlags } from "./Flags.ts"
import { Effect } from "effect"
import * as Env from "../src/vocabulary/Env.ts"
import { loadEnv } from "../src/app/LoadEnv.ts"
import { type ResolvedLoss, resolveLoss } from "../src/loss/Loss.ts"
import { VOCAB_SIZE } from "../src/backends/local/CharTokenizer.ts"
import { codecOf, type EnvCodec } from "./EnvCodec.ts"
import { machine, writeModelFolder } from "./ModelFolder.ts"
import { initTf } from "../src/backends/local/index.ts"
import { countParams, baseShapes, initBase, LocalModel, type ModelConfig, type Weights, cloneWeights } from "../src/backends/local/Model.ts"
import { Rng } from "../src/backends/local/Rng.ts"
import { LocalSamplerEngine } from "../src/backends/local/SamplerEngine.ts"
import { LocalTrainerEngine } from "../src/backends/local/TrainerEngine.ts"

const USAGE = `Pretrains the embedded base model from scratch on an env's training problems.

usage: npx tsx scripts/pretrain.ts [flags]      (npm run pretrain = all defaults)

  --env <name|path>      env in envs/ or a path to a module with a default Env export;
                         it needs a reference(problem) and text prompts (default: math)
  --out <dir>            folder to write config.json, weights.bin, card.json
                         (default: models/base, the model \`run\` loads; required with
                         an --env other than math, so models/base is never replaced by
                         accident)
  --seed <n>             initialization and data order (default 1)
  --difficulty <n>       generator difficulty (default: the env's, else 1)
  --batch <n>            problems per step (default 32)
  --lr <x>               peak Adam learning rate (default 0.002)
  --max-steps <n>        at most this many steps (default 3000)
  --eval-every <n>       measure the selection set every n steps (default 25; every
                         min(n, 10) steps once checkpoints are candidates)
  --candidate-from <x>   quick accuracy from which checkpoints become candidates (default 0.2)
  --target <x>           accuracy to aim for, within [0.25, 0.4] (default 0.3)
  --probe <x>            an experiment, not for the shipped model: keep this fraction of
                         the train split's problems (by hash) out of pretraining and report
                         their accuracy beside the selection set's; it asks how far the
                         model generalizes to problems it never saw. Needs --out.
  --help                 print this and exit

Only problems of the env's train split are trained on or used to choose the checkpoint;
the eval split (what \`run\` reports as test/env/...) is measured once, at the end.`

// ===== Flags =====

const fail = failWith("pretrain")

const parseArgs = (argv: ReadonlyArray<string>) => {
  const flags = parseFlags({ script: "pretrain", usage: USAGE, numeric: ["seed", "difficulty", "batch", "lr", "max-steps", "eval-every", "candidate-from", "target", "probe"], text: ["env", "out"], argv })
  const num = flags.num
  const posInt = (x: number) => Number.isInteger(x) && x > 0
  const frac = (x: number) => x >= 0 && x <= 1
  return {
    env: flags.text("env") ?? "math",
    out: flags.text("out"),
    seed: num("seed", 1, (x) => Number.isInteger(x) && x >= 0, "an integer >= 0"),
    difficulty: flags.has("difficulty") ? num("difficulty", 1, posInt, "an integer >= 1") : undefined,
    batch: num("batch", 32, posInt, "an integer >= 1"),
    lr: num("lr", 2e-3, (x) => x > 0, "> 0"),
    maxSteps: num("max-steps", 3000, posInt, "an integer >= 1"),
    evalEvery: num("eval-every", 25, posInt, "an integer >= 1"),
    candidateFrom: num("candidate-from", 0.2, frac, "in [0, 1]"),
    target: num("target", 0.3, (x) => x >= 0.25 && x <= 0.4, "in [0.25, 0.4] (the accepted band)"),
    probe: num("probe", 0, (x) => x >= 0 && x < 1, "in [0, 1)"),
  }
}

const args = parseArgs(process.argv.slice(2))

// ===== Settings =====

const settings = {
  env: args.env,
  seed: args.seed,
  batchSize: args.batch,
  learningRate: args.lr,
  warmupSteps: 30,
  beta1: 0.9,
  beta2: 0.99,
  eps: 1e-8,
  gradClipNorm: 1,
  maxSteps: args.maxSteps,
  evalEvery: args.evalEvery,
  candidateEvery: Math.min(10, args.evalEvery),
  selectionSize: 300,
  selectionSeed: 0,
  candidateFrom: args.candidateFrom,
  candidateSamples: 10,
  minAcc: 0.25,
  maxAcc: 0.4,
  targetAcc: args.target,
  heldOutSeed: 0,
  probe: args.probe,
}
const config: ModelConfig = { vocabSize: VOCAB_SIZE, contextLength: 48, nLayers: 2, dModel: 128, nHeads: 4, mlpRatio: 4 }

const run = <A>(eff: Effect.Effect<A, Env.EnvError>) => Effect.runPromise(eff.pipe(Effect.mapError((e) => new Error(e.message))))

/** a label to break accuracy down by (math: the operation) */
const groupOf = (p: unknown) => (typeof p === "object" && p !== null && "op" in p ? String((p as { op: unknown }).op) : "all")

// ===== Steps =====

/** Loads --env and checks it against the flags: one env, with a reference completion of each problem. */
const loadPretrainEnv = async () => {
  const loaded = await Effect.runPromise(Effect.result(loadEnv(args.env))).then((r) =>
    r._tag === "Success" ? r.success : fail(`--env ${args.env}: ${r.failure.message}`)
  )
  if (!Env.isEnv(loaded)) return fail(`--env ${args.env}: a mixture; pretrain on one env at a time`)
  const env: Env.AnyEnv = loaded
  if (env.reference === undefined) return fail(`--env ${args.env}: env "${env.name}" has no reference(problem); pretraining needs the reference completion of each problem`)
  const reference = env.reference
  if (args.out === undefined && env.name !== "math") return fail(`--env ${args.env}: give --out <dir>; models/base is the math base model that \`run\` loads`)
  if (args.out === undefined && args.probe > 0) return fail(`--probe ${args.probe}: give --out <dir>; a model pretrained on part of the train split is not the shipped base model`)
  return { env, reference }
}

/** T=1 (or greedy) accuracy of `weights` on `problems`, `samples` each */
const accuracy = async (codec: EnvCodec, weights: Weights, problems: ReadonlyArray<unknown>, samples: number, temperature: number, seed: number) => {
  const model = new LocalModel(config, weights)
  const sampler = new LocalSamplerEngine(model, { seed, prefixCacheSize: 0 })
  const results = await Promise.all(problems.map((p) => sampler.sample(codec.promptIds(p), { maxTokens: codec.maxTokens, temperature }, { numSamples: samples })))
  let right = 0
  const byGroup: Record<string, [number, number]> = {}
  results.forEach((r, k) => {
    const p = problems[k]!
    const g = (byGroup[groupOf(p)] ??= [0, 0])
    for (const s of r.sequences) {
      const ok = codec.isCorrect(p, s.tokens, s.stopReason)
      right += ok ? 1 : 0
      g[0] += ok ? 1 : 0
      g[1] += 1
    }
  })
  sampler.dispose()
  model.dispose()
  const n = problems.length * samples
  return { acc: right / n, n, problems: problems.length, byGroup: Object.fromEntries(Object.entries(byGroup).map(([k, [a, b]]) => [k, a / b])) }
}

interface Sets {
  /** distinct train-split problems the checkpoint is chosen on */
  readonly selection: ReadonlyArray<unknown>
  /** --probe: train-split problems never trained on */
  readonly probe: ReadonlyArray<unknown>
}

interface Candidate {
  readonly step: number
  readonly weights: Weights
  readonly acc: number
  readonly n: number
  readonly byGroup: Record<string, number>
  readonly quick: number
  readonly draws: number
  readonly distinct: number
  readonly probe?: number
}

interface ProbePoint {
  readonly step: number
  readonly selection: number
  readonly probe: number
}

/** The next batch of train-split problems from draw `from` on, without probe problems; and the next draw. */
const drawBatch = async (codec: EnvCodec, from: number) => {
  const tasks: Array<Env.Task<unknown>> = []
  let drawn = from
  while (tasks.length < settings.batchSize) {
    const task = await run(Env.problemAt(codec.env, { seed: settings.seed, index: drawn++, split: "train", difficulty: codec.difficulty }))
    if (!codec.isProbe(task.problem)) tasks.push(task)
  }
  return { tasks, drawn }
}

/**
 * Measures the trainer's weights at `at.step`: the quick accuracy on the selection set,
 * the probe set's, and, once the quick accuracy reaches candidateFrom, a candidate.
 * Returns them with the progress line to print.
 */
const measureCheckpoint = async (
  codec: EnvCodec,
  sets: Sets,
  params: Weights,
  rng: Rng,
  at: { readonly step: number; readonly t0: number; readonly trainSeconds: number; readonly lossEma: number; readonly distinct: number },
): Promise<{ readonly line: string; readonly probe?: ProbePoint; readonly candidate?: Candidate }> => {
  const { step } = at
  const quick = await accuracy(codec, params, sets.selection, 1, 1, rng.nextU32())
  const wall = (performance.now() - at.t0) / 1000
  let line = `step ${step} wall ${wall.toFixed(0)}s train ${at.trainSeconds.toFixed(0)}s loss ${at.lossEma.toFixed(3)} T=1(${quick.n}) ${quick.acc.toFixed(3)}`
  let probeAcc: number | undefined
  let probe: ProbePoint | undefined
  if (sets.probe.length > 0) {
    probeAcc = (await accuracy(codec, params, sets.probe, 4, 1, rng.nextU32())).acc
    probe = { step, selection: quick.acc, probe: probeAcc }
    line += ` probe T=1(${sets.probe.length * 4}) ${probeAcc.toFixed(3)}`
  }
  if (quick.acc < settings.candidateFrom) return { line, ...(probe !== undefined ? { probe } : {}) }
  const weights = cloneWeights(params)
  const full = await accuracy(codec, weights, sets.selection, settings.candidateSamples, 1, rng.nextU32())
  const candidate: Candidate = { step, weights, acc: full.acc, n: full.n, byGroup: full.byGroup, quick: quick.acc, draws: step * settings.batchSize, distinct: at.distinct, ...(probeAcc !== undefined ? { probe: probeAcc } : {}) }
  line += ` | candidate T=1(${full.n}) ${full.acc.toFixed(3)}`
  return { line, ...(probe !== undefined ? { probe } : {}), candidate }
}

/**
 * Trains for at most maxSteps, measuring every evalEvery steps (candidateEvery once there
 * are candidates, to land near the target); stops early once a candidate overshoots the band.
 */
const train = async (codec: EnvCodec, sets: Sets, trainer: LocalTrainerEngine, loss: ResolvedLoss, t0: number) => {
  const rng = new Rng(settings.seed)
  let drawn = 0
  const seen = new Set<string>()
  const candidates: Array<Candidate> = []
  const probes: Array<ProbePoint> = []
  let lossEma = 0
  let trainSeconds = 0
  for (let step = 1; step <= settings.maxSteps; step++) {
    const batch = await drawBatch(codec, drawn)
    drawn = batch.drawn
    for (const t of batch.tasks) seen.add(JSON.stringify(t.problem))
    const ts = performance.now()
    const out = trainer.run(batch.tasks.map((t) => codec.toDatum(t.problem)), loss, { backward: true })
    const lr = settings.learningRate * Math.min(1, step / settings.warmupSteps)
    trainer.optimStep({ learningRate: lr, beta1: settings.beta1, beta2: settings.beta2, eps: settings.eps, weightDecay: 0, gradClipNorm: settings.gradClipNorm })
    trainSeconds += (performance.now() - ts) / 1000
    lossEma = step === 1 ? out.metrics["loss"]! : 0.9 * lossEma + 0.1 * out.metrics["loss"]!
    if (step % (candidates.length > 0 ? settings.candidateEvery : settings.evalEvery) !== 0) continue
    const measured = await measureCheckpoint(codec, sets, trainer.params, rng, { step, t0, trainSeconds, lossEma, distinct: seen.size })
    if (measured.probe !== undefined) probes.push(measured.probe)
    if (measured.candidate !== undefined) candidates.push(measured.candidate)
    console.log(measured.line)
    if (measured.candidate !== undefined && measured.candidate.acc > settings.maxAcc + 0.05) break
  }
  return { candidates, probes, seen, trainSeconds }
}

/** The candidate in [minAcc, maxAcc] closest to the target; exits if none is in the band. */
const choose = (candidates: ReadonlyArray<Candidate>): Candidate => {
  const inBand = candidates.filter((c) => c.acc >= settings.minAcc && c.acc <= settings.maxAcc)
  if (inBand.length === 0) {
    console.error("pretrain: no candidate landed in the accuracy band [minAcc, maxAcc]; candidates (step, accuracy):", candidates.map((c) => [c.step, c.acc]))
    console.error("try a smaller --lr or --eval-every, or more --max-steps")
    process.exit(1)
  }
  return inBand.reduce((a, b) => (Math.abs(b.acc - settings.targetAcc) < Math.abs(a.acc - settings.targetAcc) ? b : a))
}

/**
 * Measured once, after the choice, never used for it: the training side again with a
 * fresh seed, and the held-out eval split that the runner reports. Fails if a
 * pretraining problem is in the eval split.
 */
const measureChosen = async (codec: EnvCodec, selection: ReadonlyArray<unknown>, chosen: Candidate, seen: ReadonlySet<string>) => {
  const heldOut = await run(Env.evalSetInfo(codec.env, { seed: settings.heldOutSeed, difficulty: codec.difficulty }))
  const heldOutProblems = heldOut.tasks.map((t) => t.problem)
  const heldOutKeys = new Set(heldOutProblems.map((p) => JSON.stringify(p)))
  const leaked = [...seen].filter((k) => heldOutKeys.has(k)).length
  if (leaked > 0) throw new Error(`${leaked} pretraining problems are in the eval split: the split is broken`)
  const trainT1 = await accuracy(codec, chosen.weights, selection, settings.candidateSamples, 1, 777)
  const heldOutT1 = await accuracy(codec, chosen.weights, heldOutProblems, settings.candidateSamples, 1, 778)
  const heldOutGreedy = await accuracy(codec, chosen.weights, heldOutProblems, 1, 0, 0)
  const trainGreedy = await accuracy(codec, chosen.weights, selection, 1, 0, 0)
  return { heldOut, trainT1, heldOutT1, heldOutGreedy, trainGreedy }
}

/** card.json: the model, its data, how the checkpoint was chosen and what it measured. */
const cardOf = (run: {
  readonly codec: EnvCodec
  readonly sets: Sets
  readonly training: Awaited<ReturnType<typeof train>>
  readonly chosen: Candidate
  readonly measured: Awaited<ReturnType<typeof measureChosen>>
  readonly wallSeconds: number
}) => {
  const { codec: { env, difficulty }, sets: { selection, probe }, training: { candidates, probes, trainSeconds }, chosen } = run
  const { heldOut, trainT1, heldOutT1, heldOutGreedy, trainGreedy } = run.measured
  return {
    model: { ...config, parameters: countParams(baseShapes(config)), tokenizer: "char-ascii" },
    env: env.name,
    data:
      `${env.name} problems of the train split only (Env.problemAt split "train", difficulty ${difficulty}): ${chosen.draws} draws up to the chosen step, ` +
      `${chosen.distinct} distinct problems; none of the eval split (eval.heldOut ${env.eval?.heldOut ?? 0.1})` +
      (args.probe > 0 ? `, none of the ${probe.length} probe problems` : "") + `; ` +
      `sequence = BOS ++ prompt ++ reference ++ EOS; loss on the reference and EOS only`,
    settings,
    chosenStep: chosen.step,
    selection:
      `T=1 accuracy on the selection set (${selection.length} distinct train-split problems, Env.distinctTasks seed ${settings.selectionSeed}) ` +
      `x ${settings.candidateSamples} samples; the candidate in [minAcc, maxAcc] closest to targetAcc. The selection set is the ` +
      `training side on purpose: the choice calibrates RL's starting accuracy on the problems RL trains on. The eval split is not used.`,
    candidates: candidates.map((c) => ({ step: c.step, quickT1: c.quick, t1: c.acc, samples: c.n, ...(c.probe !== undefined ? { probeT1: c.probe } : {}) })),
    ...(args.probe > 0 ? { probe: { fraction: args.probe, problems: probe.length, samplesPerProblem: 4, curve: probes } } : {}),
    accuracy: {
      trainT1: { value: trainT1.acc, problems: trainT1.problems, samples: trainT1.n, byGroup: trainT1.byGroup, note: "selection set, re-measured with a fresh seed" },
      trainGreedy: { value: trainGreedy.acc, problems: trainGreedy.problems, samples: trainGreedy.n },
      heldOutT1: {
        value: heldOutT1.acc,
        problems: heldOutT1.problems,
        samples: heldOutT1.n,
        byGroup: heldOutT1.byGroup,
        note: `the runner's eval set (Env.evalSet seed ${settings.heldOutSeed}: ${heldOut.tasks.length} distinct problems${heldOut.exhausted ? ", the whole eval split" : ""}), never trained on or used for selection`,
      },
      heldOutGreedy: { value: heldOutGreedy.acc, problems: heldOutGreedy.problems, samples: heldOutGreedy.n },
      correct: "completion ends with EOS and its text, trimmed, equals the reference, trimmed",
    },
    wallSeconds: run.wallSeconds,
    trainSeconds,
    machine: machine(),
    command: `npx tsx scripts/pretrain.ts ${process.argv.slice(2).join(" ")}`.trim(),
  }
}

const main = async () => {
  const { env, reference } = await loadPretrainEnv()
  const codec = codecOf(env, reference, { difficulty: args.difficulty, probe: args.probe, contextLength: config.contextLength, fail })
  const outDir = args.out ?? "models/base"
  await initTf()
  const t0 = performance.now()
  // the selection set: distinct problems of the train split (never the eval split)
  const trainSide = (await run(Env.distinctTasks(env, { split: "train", seed: settings.selectionSeed, size: settings.selectionSize, difficulty: codec.difficulty }))).tasks.map((t) => t.problem)
  const sets: Sets = { selection: trainSide.filter((p) => !codec.isProbe(p)), probe: trainSide.filter(codec.isProbe) }
  const model = new LocalModel(config, initBase(config, settings.seed))
  const trainer = new LocalTrainerEngine(model, { mode: "full" })
  const ce = resolveLoss("cross_entropy", {})
  if (!ce.ok) throw new Error(ce.message)
  console.log(`pretraining ${countParams(baseShapes(config))} parameters on ${env.name} (train split, difficulty ${codec.difficulty}), ${JSON.stringify(config)}`)
  console.log(`settings ${JSON.stringify(settings)}`)
  console.log(`selection set: ${sets.selection.length} distinct train-split problems${args.probe > 0 ? `; probe set (never trained on): ${sets.probe.length}` : ""}`)

  const training = await train(codec, sets, trainer, ce.value, t0)
  const chosen = choose(training.candidates)
  const measured = await measureChosen(codec, sets.selection, chosen, training.seen)
  const wallSeconds = (performance.now() - t0) / 1000
  await writeModelFolder(outDir, config, chosen.weights, cardOf({ codec, sets, training, chosen, measured, wallSeconds }))
  const { trainT1, heldOutT1, heldOutGreedy } = measured
  console.log(
    `chose step ${chosen.step}: train T=1 ${trainT1.acc.toFixed(3)} (${trainT1.problems} problems x ${settings.candidateSamples}), ` +
      `held-out T=1 ${heldOutT1.acc.toFixed(3)} (${heldOutT1.problems} problems x ${settings.candidateSamples}), held-out greedy ${heldOutGreedy.acc.toFixed(3)}`,
  )
  console.log(`wrote ${outDir} in ${wallSeconds.toFixed(0)} s`)
  trainer.dispose()
  model.dispose()
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
