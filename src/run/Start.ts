/**
 * Where a run starts: a fresh run folder, or a resumed one after its newest checkpoint
 * that loads; a fresh run may start from another run's trainer weights (`initFrom`).
 *
 * @since 0.1.0
 */
import * as Path from "node:path"
import { Effect } from "effect"
import type { BackendError } from "../contract/Contract.ts"
import * as RunFolder from "../folder/RunFolder.ts"
import * as RunLog from "../folder/RunLog.ts"
import * as PlatformFs from "../platform/FileSystem.ts"
import * as CharTokenizer from "../backends/local/CharTokenizer.ts"
import { Tokenizer, type TokenizerShape } from "../services/Tokenizer.ts"
import { Trainer, type TrainerInfo } from "../services/Trainer.ts"
import * as BaseModel from "./BaseModel.ts"
import { fail, RunError, type RunSettings } from "./Settings.ts"

type Files = RunFolder.Files

/** What is at `path` (a file, a folder, ...); undefined when nothing is; fails with the system's message when it cannot be looked at. */
const typeOf = (path: string) =>
  Effect.flatMap(PlatformFs.current, (fs) => fs.stat(path)).pipe(
    Effect.map((info): string | undefined => info.type),
    Effect.catchIf((e) => e.reason._tag === "NotFound", () => Effect.succeed(undefined)),
    Effect.mapError(PlatformFs.messageOf),
  )

/** Failures that say a checkpoint itself is bad (missing, truncated, corrupt, refused), so an older one may do. */
const badCheckpoint = (e: BackendError) => e.reason === "InvalidInput" || e.reason === "Rejected"

/** Deletes temp files left by writes that a kill interrupted, in the run folder and its state folder. */
const removeTempFiles = (files: Files) =>
  Effect.gen(function* () {
    const removed = yield* RunLog.removeTempFiles([files.dir, files.state])
    if (removed.length > 0) yield* Effect.logDebug(`removed ${removed.length} temp file(s) left by an interrupted write: ${removed.join(", ")}`)
  })

/**
 * Loads the newest checkpoint that loads, newest first. A checkpoint whose file is
 * missing or does not decode (a power loss can leave its row on disk without its bytes)
 * is skipped with a warning naming the file and why; a transport failure stops the resume.
 * Returns the step loaded (0 when the folder has no checkpoint).
 */
const loadNewest = (files: Files, settings: RunSettings) =>
  Effect.gen(function* () {
    const trainer = yield* Trainer
    // Rewriting drops a line torn by a crash, so rows appended after it stay readable.
    yield* RunFolder.keepThrough(files.checkpoints, Number.POSITIVE_INFINITY)
    const checkpoints = yield* RunFolder.readCheckpoints(files)
    if (checkpoints.length === 0) {
      yield* Effect.logInfo(`no checkpoint in ${settings.outDir}: starting from step 1`)
      return 0
    }
    const skipped: Array<string> = []
    for (let i = checkpoints.length - 1; i >= 0; i--) {
      const row = checkpoints[i]! // i runs down from the last index
      const path = yield* RunFolder.statePath(files, row)
      const step = row.step
      const loaded = yield* trainer.loadState(path, { withOptimizer: true }).pipe(
        Effect.as(undefined),
        Effect.catchIf(badCheckpoint, (e) => Effect.succeed(e.message)),
        Effect.mapError((e) => new RunError({ reason: "Resume", message: `cannot load checkpoint ${path} (${e.reason}): ${e.message}` })),
      )
      if (loaded === undefined) {
        yield* Effect.logInfo(`resuming ${settings.outDir} after step ${step} from ${path}`)
        // Rows of the skipped checkpoints go: those steps are redone and saved again.
        if (i < checkpoints.length - 1) yield* RunFolder.keepThrough(files.checkpoints, step)
        return step
      }
      skipped.push(`${path}: ${loaded}`)
      yield* Effect.logWarning(`checkpoint step ${step} cannot be loaded, ${path}: ${loaded}; ${i > 0 ? "trying the one before it" : "no older checkpoint"}`)
    }
    return yield* new RunError({
      reason: "Resume",
      message: `no checkpoint in ${files.checkpoints} loads (${skipped.join("; ")}): start a new run with another --name, ` +
        `or delete ${files.checkpoints} to run this one again from step 1`,
    })
  })

// ===== tokenizer =====

/** Vocabulary sizes of the tokenizers gyre knows by the name a backend gives (a server of gyre's embedded model names its char tokenizer). */
const KNOWN_VOCABULARIES: ReadonlyMap<string, number> = new Map([[CharTokenizer.make().name, CharTokenizer.VOCAB_SIZE]])

/** Plain text any run encodes the like of: ids of it outside the model mean most text is. */
const PLAIN_TEXT = "The quick brown fox jumps over the lazy dog. 0123456789"

/** The first token the run is sure to use that the model cannot embed: its end (or start) of sequence, or one of plain text. */
const firstOutside = (tokenizer: TokenizerShape, model: number) =>
  Effect.gen(function* () {
    if (tokenizer.eos >= model) return `its end-of-sequence token ${tokenizer.eos}`
    if (tokenizer.bos !== undefined && tokenizer.bos >= model) return `its beginning-of-sequence token ${tokenizer.bos}`
    const ids = yield* tokenizer.encode(PLAIN_TEXT).pipe(Effect.orElseSucceed((): Array<number> => []))
    const id = ids.find((t) => t >= model)
    return id === undefined ? undefined : `token ${id} of plain text (${JSON.stringify(PLAIN_TEXT)})`
  })

/**
 * Refuses a tokenizer that does not fit the model the backend serves: when its end (or
 * start) of sequence, which every sample holds, or the tokens of plain text are past the
 * model's vocabulary, they cannot be embedded and samples would be refused or trained on
 * nothing. The model's size is the one the backend gives (the embedded model's), else that
 * of the tokenizer it names when gyre knows it; a backend that says neither is not
 * checked. A tokenizer with a few more ids than the model (added tokens no text uses) is
 * let through.
 * @since 0.1.0 @category running
 */
export const checkTokenizerFits = Effect.fn("Start.checkTokenizerFits")(function* (info: TrainerInfo, tokenizer: TokenizerShape) {
  const named = info.tokenizerId === undefined ? undefined : KNOWN_VOCABULARIES.get(info.tokenizerId)
  const model = info.vocabSize ?? named
  if (model === undefined || tokenizer.vocabSize <= model) return
  const outside = yield* firstOutside(tokenizer, model)
  if (outside === undefined) return
  const source = info.vocabSize !== undefined ? "its vocabulary" : `the vocabulary of its tokenizer ${info.tokenizerId}`
  return yield* new RunError({
    reason: "Settings",
    message:
      `the tokenizer ${tokenizer.name} has ${tokenizer.vocabSize} tokens, but the model the backend serves (${info.modelName}) has ${model} (${source}): ` +
      `${outside} is outside the model, so samples would be refused or trained on nothing. ` +
      `Give --tokenizer the folder of that model's own tokenizer (its tokenizer.json), or leave --tokenizer out for gyre's embedded models`,
  })
})

// ===== backend =====

/**
 * The backend a run trains on: `given` (`--backend`), else the one a resumed run's
 * `config.json` records, else the embedded model. A resumed run's checkpoints live on the
 * backend it trained on (the run folder's state files, or a server's `tinker://` paths),
 * so `--resume` with another `--backend` is refused, naming both; a server that now
 * answers at another address is given by editing `backend` in `config.json`.
 * @since 0.1.0 @category running
 */
export const resumeBackend = (given: string | undefined, saved: { readonly backend?: string | undefined } | undefined, resumeDir: string | undefined) =>
  Effect.gen(function* () {
    if (saved === undefined) return given ?? "embedded"
    const recorded = saved.backend ?? "embedded"
    if (given === undefined || given === recorded) return recorded
    const url = (b: string) => /^https?:\/\//.test(b)
    const where = recorded === "embedded" ? "the run folder's state files" : url(recorded) ? `tinker:// paths on ${recorded}` : `kept by the ${recorded} backend`
    return yield* new RunError({
      reason: "Resume",
      message:
        `--resume ${resumeDir}: the run trained on backend ${recorded} (its config.json) and its checkpoints are ${where}, but --backend ${given} was given; ` +
        `leave --backend out to continue on ${recorded}` +
        (!url(recorded) || !url(given) ? "" : ` (if that server now answers at ${given}, set "backend" in ${Path.join(resumeDir ?? ".", "config.json")} to it)`),
    })
  })

// ===== initFrom =====

/** What `initFrom` accepts, for error messages. */
const INIT_FROM_FORMS =
  "give a run folder (runs/<name>: its newest checkpoint that loads), a run folder and step (runs/<name>/step-30) or a state file (runs/<name>/state/step-30.ckpt)"

/**
 * The trainer a run trained, as `config.json` records it (`RunFolder.TrainerRecord`).
 * Embedded model folders are absolute, with their weights' digest, which is what
 * `--init-from` compares.
 * @since 0.1.0 @category models
 */
export type TrainerRecord = RunFolder.TrainerRecord

/** The trainer `info` describes, with its embedded model's weights digest (`BaseModel.withDigest`). */
const trainerRecord = (info: { readonly modelName: string; readonly loraRank: number }) =>
  BaseModel.withDigest({
    model: info.modelName.startsWith("local:") && info.modelName !== "local:random" ? `local:${Path.resolve(info.modelName.slice("local:".length))}` : info.modelName,
    loraRank: info.loraRank,
  })

/** The `trainer` record in a run folder's config.json; undefined when it has none (an older run) or none can be read. @since 0.1.0 @category running */
export const recordedTrainer = (dir: string) =>
  RunFolder.readConfigHints(RunFolder.paths(dir)).pipe(
    Effect.map(({ hints }) => hints?.trainer),
    Effect.orElseSucceed(() => undefined),
  )

/** The `--model` value that names a recorded model. @since 0.1.0 @category running */
export const modelFlag = (model: string) => (model.startsWith("local:") ? model.slice("local:".length) : model)

/** State files that `initFrom` names, newest first, and the run folder they belong to (when known). */
interface InitSource {
  readonly dir: string | undefined
  readonly candidates: ReadonlyArray<{ readonly step: number | undefined; readonly path: string }>
}

/**
 * Resolves `initFrom`: a state file (or a backend's remote path), a run folder (every
 * checkpoint, newest first), or `<run folder>/step-N` (that checkpoint). Reads the run
 * folder and never changes it. `named` says who asks, for errors (default `--init-from`
 * and the forms it takes).
 * @since 0.1.0 @category running
 */
export const resolveInit = (given: string, named: { readonly flag: string; readonly forms: string } = { flag: "--init-from", forms: INIT_FROM_FORMS }) =>
  Effect.gen(function* () {
    const bad = (what: string) => new RunError({ reason: "Settings", message: `${named.flag} ${given}: ${what}; ${named.forms}` })
    if (given.includes("://")) return { dir: undefined, candidates: [{ step: undefined, path: given }] } satisfies InitSource
    const type = yield* typeOf(given).pipe(Effect.mapError((m) => bad(`cannot look at it: ${m}`)))
    if (type === "File") {
      // runs/<name>/state/step-N.ckpt belongs to runs/<name>
      const dir = Path.basename(Path.dirname(given)) === "state" ? Path.dirname(Path.dirname(given)) : undefined
      const step = /^step-(\d+)\.ckpt$/.exec(Path.basename(given))
      return {
        dir: dir !== undefined && (yield* PlatformFs.exists(RunFolder.paths(dir).config)) ? dir : undefined,
        candidates: [{ step: step ? Number(step[1]) : undefined, path: given }],
      } satisfies InitSource
    }
    const stepOf = type === undefined ? /^step-(\d+)$/.exec(Path.basename(given)) : null
    const dir = stepOf ? Path.dirname(given) : given
    if ((yield* typeOf(dir).pipe(Effect.mapError((m) => bad(`cannot look at it: ${m}`)))) !== "Directory") return yield* bad("no such file or folder")
    const files = RunFolder.paths(dir)
    if (!(yield* PlatformFs.exists(files.checkpoints)) && (yield* PlatformFs.exists(Path.join(dir, "weights.bin")))) {
      return yield* bad(`${dir} is not a run folder but a base model folder (weights.bin): give it as --model ${dir}, or SFT on it first`)
    }
    if (!(yield* PlatformFs.exists(files.config)) && !(yield* PlatformFs.exists(files.checkpoints))) {
      return yield* bad(`${dir} is not a run folder (it has no config.json or checkpoints.jsonl)`)
    }
    const rows = yield* RunFolder.readCheckpoints(files).pipe(Effect.mapError(fail("Settings", undefined)))
    if (rows.length === 0) {
      return yield* bad(`run folder ${dir} holds no checkpoint (${files.checkpoints} has no rows): a run saves one at its last step and every --save-every steps; finish or --resume that run first`)
    }
    const all = yield* Effect.forEach(rows, (row) => Effect.map(RunFolder.statePath(files, row), (path) => ({ step: row.step, path })))
    if (stepOf) {
      const step = Number(stepOf[1])
      const newest = all.filter((c) => c.step === step).at(-1)
      if (newest === undefined) return yield* bad(`run folder ${dir} has no checkpoint at step ${step} (its checkpoints: steps ${[...new Set(all.map((c) => c.step))].join(", ")})`)
      return { dir, candidates: [newest] } satisfies InitSource
    }
    return { dir, candidates: all.reverse() } satisfies InitSource
  })

/**
 * Loads the trainer weights (the LoRA adapter) that `initFrom` names, without their
 * optimizer state: the newest of a run folder's checkpoints that loads. Fails, naming the
 * path, when there is none, or when the run that saved it trained another base model or
 * LoRA rank. Returns the state file loaded.
 */
const loadInit = (given: string, current: TrainerRecord) =>
  Effect.gen(function* () {
    const trainer = yield* Trainer
    const source: InitSource = yield* resolveInit(given)
    const recorded = source.dir !== undefined ? yield* recordedTrainer(source.dir) : undefined
    // the same base model wherever its folder lies (the packaged model of another project, a copy)
    if (recorded !== undefined && (recorded.loraRank !== current.loraRank || !(yield* BaseModel.sameModel(recorded, current)))) {
      return yield* new RunError({
        reason: "Settings",
        message: `--init-from ${given}: run ${source.dir} trained ${BaseModel.describe(recorded)} with LoRA rank ${recorded.loraRank}, ` +
          `this run ${BaseModel.describe(current)} with LoRA rank ${current.loraRank}; ` +
          `an adapter fits only the base model and rank it was trained on: run with --model ${modelFlag(recorded.model)} --lora-rank ${recorded.loraRank}`,
      })
    }
    const skipped: Array<string> = []
    for (const [i, c] of source.candidates.entries()) {
      const loaded = yield* trainer.loadState(c.path, { withOptimizer: false }).pipe(
        Effect.as(undefined),
        Effect.catchIf(badCheckpoint, (e) => Effect.succeed(e.message)),
        Effect.mapError((e) => new RunError({ reason: "Backend", message: `--init-from ${given}: cannot load ${c.path} (${e.reason}): ${e.message}` })),
      )
      if (loaded === undefined) {
        const what = source.dir !== undefined && c.step !== undefined ? ` (step ${c.step} of ${source.dir})` : ""
        yield* Effect.logInfo(`starting from ${c.path}${what}: its trainer weights, a fresh optimizer`)
        return c.path
      }
      skipped.push(`${c.path}: ${loaded}`)
      if (i < source.candidates.length - 1) yield* Effect.logWarning(`--init-from ${given}: ${c.path} cannot be loaded (${loaded}); trying the checkpoint before it`)
    }
    const shape = skipped.some((s) => /wrong size|LoRA/.test(s))
      ? ` (this run's trainer: ${current.model}, LoRA rank ${current.loraRank}; give the --model and --lora-rank of the run that saved it)`
      : ""
    return yield* new RunError({
      reason: "Settings",
      message: `--init-from ${given}: no checkpoint loads${shape}: ${skipped.join("; ")}; ${INIT_FROM_FORMS}`,
    })
  })

/**
 * Where a run starts: fresh (from `initFrom`'s trainer weights when it is set), or after
 * its newest complete checkpoint, once its tokenizer is known to fit the backend's model
 * (`checkTokenizerFits`). Writes `config.json`: the settings, `initFrom` as the
 * state file it resolved to, and `trainer` (the base model and LoRA rank trained).
 * @since 0.1.0 @category running
 */
export const prepare = Effect.fnUntraced(function* (settings: RunSettings, resume: boolean) {
  const trainer = yield* Trainer
  const files = RunFolder.paths(settings.outDir)
  const info = yield* trainer.info.pipe(Effect.mapError((e) => new RunError({ reason: "Backend", message: `info (${e.reason}): ${e.message}` })))
  // before anything is written: a run whose tokens do not fit its model trains nothing
  yield* checkTokenizerFits(info, yield* Tokenizer)
  const current = yield* trainerRecord(info)
  let start = 0
  if (!resume && (yield* PlatformFs.exists(files.config))) {
    if (yield* RunFolder.holdsWork(files).pipe(Effect.mapError(fail("RunFolder", undefined)))) {
      return yield* new RunError({
        reason: "RunFolder",
        message: `run folder ${settings.outDir} already holds a run: continue it with --resume ${settings.outDir}, or pick another --name`,
      })
    }
    // A run that failed at startup left only its config (and maybe the base evaluation): start over in its folder.
    yield* Effect.logInfo(`run folder ${settings.outDir} holds no finished step and no checkpoint (a run that stopped at startup): starting over in it`)
    const fs = yield* PlatformFs.current
    yield* Effect.forEach([files.metrics, files.rollouts, files.checkpoints, files.report], (file) => fs.remove(file, { force: true }), { discard: true }).pipe(
      Effect.mapError((e) => new RunError({ reason: "RunFolder", message: `cannot clear ${settings.outDir} for a new run: ${PlatformFs.messageOf(e)}` })),
    )
  }
  yield* removeTempFiles(files).pipe(Effect.mapError(fail("RunFolder", undefined)))
  if (resume) {
    start = yield* loadNewest(files, settings).pipe(Effect.mapError((e) => e instanceof RunError ? e : fail("RunFolder", undefined)(e)))
    // Drop rows of steps after the checkpoint: they are redone with the same data and seeds.
    for (const file of [files.metrics, files.rollouts]) {
      // With no checkpoint the run starts over, base evaluation (step 0) included.
      yield* RunFolder.keepThrough(file, start).pipe(Effect.mapError(fail("RunFolder", undefined)))
    }
  }
  // A fresh run (or a resumed one with no checkpoint of its own yet) starts from initFrom's
  // weights; config.json records the state file it resolved to, so a resume loads the same.
  const initFrom = settings.initFrom !== undefined && start === 0 ? yield* loadInit(settings.initFrom, current) : settings.initFrom
  const recorded: RunFolder.Config = { ...settings, ...(initFrom !== undefined ? { initFrom } : {}), trainer: current }
  yield* RunFolder.writeConfig(files, recorded).pipe(Effect.mapError(fail("RunFolder", undefined)))
  const published = yield* trainer.saveWeightsForSampler(`step-${start}`).pipe(
    Effect.mapError((e) => new RunError({ reason: "Backend", message: `save_weights_for_sampler (${e.reason}): ${e.message}` })),
  )
  return { start, version: published.version }
})
