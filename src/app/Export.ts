/**
 * Adapter export: a run's LoRA adapter in PEFT's layout, for tools that load PEFT
 * adapters (`PeftModel.from_pretrained(base, dir)`, vLLM's `--lora-modules`, ...).
 *
 * `exportRun` (what `gyre export runs/<name> [--step N] --out DIR` runs) writes two files:
 * - `adapter_model.safetensors`: float32 tensors named as PEFT saves them,
 *   `base_model.model.<module path>.lora_A.weight` of shape [r, in] and
 *   `base_model.model.<module path>.lora_B.weight` of shape [out, r];
 * - `adapter_config.json`: `peft_type` LORA, `task_type` CAUSAL_LM, `r`, `lora_alpha`,
 *   `target_modules`, `base_model_name_or_path`.
 *
 * Module paths of the embedded model (a decoder-only transformer with separate q/k/v
 * projections and a two-layer MLP), in the Llama-style naming most tools know:
 *
 * | gyre projection | module path |
 * |---|---|
 * | `l{i}.q` | `model.layers.{i}.self_attn.q_proj` |
 * | `l{i}.k` | `model.layers.{i}.self_attn.k_proj` |
 * | `l{i}.v` | `model.layers.{i}.self_attn.v_proj` |
 * | `l{i}.o` | `model.layers.{i}.self_attn.o_proj` |
 * | `l{i}.w1` (d -> mlp) | `model.layers.{i}.mlp.up_proj` |
 * | `l{i}.w2` (mlp -> d) | `model.layers.{i}.mlp.down_proj` |
 *
 * gyre computes `y = x·W + (alpha/r)·(x·A)·B` with `A` [in, r] and `B` [r, out] (row
 * vectors); PEFT computes `y = x·Wᵀ + (alpha/r)·x·lora_Aᵀ·lora_Bᵀ` with `lora_A` [r, in]
 * and `lora_B` [out, r]. So the export transposes both: `lora_A = Aᵀ`, `lora_B = Bᵀ`,
 * and the update `lora_B·lora_A = (A·B)ᵀ` is gyre's, in the [out, in] layout of a torch
 * `Linear` weight.
 *
 * The adapter comes from a checkpoint of the run (`checkpoints.jsonl`): the last one, or
 * the one of `--step`. A run over HTTP keeps its checkpoints on the server
 * (`tinker://...`): export downloads the state file through the server's archive route
 * (`GET /api/v1/training_runs/{model_id}/checkpoints/{checkpoint_id}/archive`), from the
 * server that `--backend URL` names, else the run's `config.json` (`backend`), else
 * `TINKER_BASE_URL`.
 *
 * A Loops checkpoint (`bt://loops:<run_id>/...`, as a run on `--backend loops` records
 * it, or given instead of the run folder) is downloaded file by file through its
 * presigned URLs into `--out`, as Loops stores it (`backends/loops/Checkpoints.ts`).
 *
 * @since 0.1.0
 */
import * as Path from "node:path"
import { Config, Effect, Option, Schema } from "effect"
import * as Checkpoints from "../backends/http/client/ClientCheckpoints.ts"
import * as LoopsCheckpoints from "../backends/loops/Checkpoints.ts"
import type * as Retry from "../backends/http/client/Retry.ts"
import * as Checkpoint from "../backends/local/Checkpoint.ts"
import { encodeSafetensors, peftAdapter } from "../backends/local/Peft.ts"
import * as Env from "../vocabulary/Env.ts"
import * as PlatformFs from "../platform/FileSystem.ts"
import * as PlatformHttpClient from "../platform/HttpClient.ts"
import * as RunFolder from "../folder/RunFolder.ts"
import * as RunLog from "../folder/RunLog.ts"

// ===== Errors =====

/**
 * An export failed: the run has no checkpoint (`NoCheckpoint`), the folder or a file in
 * it is not what a run writes (`RunFolder`, `State`), the checkpoint lives on a server
 * that is not named or cannot hand it out (`Remote`), or the output could not be
 * written (`Write`).
 * @since 0.1.0 @category errors
 */
export class ExportError extends Schema.TaggedError<ExportError>()("ExportError", {
  reason: Schema.Literals(["NoCheckpoint", "RunFolder", "State", "Remote", "Write"]),
  message: Schema.String,
}) {}

// ===== PEFT layout (src/backends/local/Peft.ts) =====

export { encodeSafetensors, MODULE_NAMES, modulePath, type PeftAdapter, peftAdapter, type Tensor } from "../backends/local/Peft.ts"

// ===== Export of a run =====

/** Options of `exportRun`. @since 0.1.0 @category models */
export interface ExportOptions {
  /** the step whose checkpoint to export (default: the last checkpoint) */
  readonly step?: number | undefined
  /** the folder to write `adapter_model.safetensors` and `adapter_config.json` to */
  readonly out: string
  /** `base_model_name_or_path` (default: the run's env's base model, else gyre's embedded base model folder) */
  readonly baseModel?: string | undefined
  /** the server holding a run's `tinker://` checkpoints (default: config.json's `backend`, else `TINKER_BASE_URL`) */
  readonly backend?: string | undefined
  /** how the download retries (default `Retry.standard`) */
  readonly retry?: Retry.Policy | undefined
}

/** What `exportRun` wrote. @since 0.1.0 @category models */
export interface ExportResult {
  readonly step: number
  readonly checkpoint: string
  readonly files: ReadonlyArray<string>
  readonly tensors: number
}

const fail = (reason: ExportError["reason"], message: string) => new ExportError({ reason, message })

/** Whether `path` is a folder; false when nothing is there; fails when it cannot be looked at. */
const isFolder = (path: string) =>
  Effect.flatMap(PlatformFs.current, (fs) => fs.stat(path)).pipe(
    Effect.map((info) => info.type === "Directory"),
    Effect.catchIf((e) => e.reason._tag === "NotFound", () => Effect.succeed(false)),
  )

/** The state file of a checkpoint on this machine: the path the run recorded, else its name in the run's state folder. */
const localState = (stateDir: string, row: RunFolder.CheckpointRow) =>
  Effect.gen(function* () {
    const { path: saved, step } = row
    const candidates = [saved, Path.join(stateDir, `${row.name}.ckpt`)]
    const file = Option.getOrUndefined(yield* Effect.findFirst(candidates, PlatformFs.exists))
    if (file === undefined) return yield* fail("State", `the state file of step ${step} is missing (looked at ${[...new Set(candidates)].join(" and ")})`)
    const state = yield* Effect.tryPromise({ try: () => Checkpoint.read(file), catch: (e) => fail("State", `${file}: ${e instanceof Error ? e.message : String(e)}`) })
    return { file, state }
  })

/** The fields of the run's config.json that export reads; empty when it is missing or does not decode. */
const readConfig = (dir: string) =>
  RunFolder.readConfigHints(RunFolder.paths(dir)).pipe(
    Effect.map(({ hints }): RunFolder.ConfigHints => hints ?? {}),
    Effect.orElseSucceed((): RunFolder.ConfigHints => ({})),
  )

/** The server of a run's remote checkpoints: `--backend`, else config.json's `backend`, else `TINKER_BASE_URL`. */
const serverOf = (dir: string, given: string | undefined) =>
  Effect.gen(function* () {
    if (given !== undefined) return Option.some({ url: given, from: "--backend" })
    const recorded = (yield* readConfig(dir)).backend
    if (recorded !== undefined && /^https?:\/\//.test(recorded)) return Option.some({ url: recorded, from: "config.json" })
    const env = yield* Config.option(Config.String("TINKER_BASE_URL")).pipe(Effect.orElseSucceed(() => Option.none<string>()))
    return Option.map(env, (url) => ({ url, from: "TINKER_BASE_URL" }))
  })

/** The state file of a `tinker://` checkpoint, downloaded from its server. */
const downloadState = (dir: string, step: number, saved: string, backend: string | undefined, retry: Retry.Policy | undefined) =>
  Effect.gen(function* () {
    const server = yield* serverOf(dir, backend)
    if (Option.isNone(server)) {
      return yield* fail(
        "Remote",
        `the checkpoint of step ${step} is on the training server (${saved}), and neither --backend nor the run's config.json names that server: ` +
          "give its URL, e.g. --backend http://127.0.0.1:8080",
      )
    }
    const { from, url } = server.value
    if (!/^https?:\/\//.test(url)) return yield* fail("Remote", `${from} must be an http(s):// URL of the training server, got ${JSON.stringify(url)}`)
    const bytes = yield* Checkpoints.download(saved, { baseUrl: url, retry }).pipe(
      Effect.provide(PlatformHttpClient.layer),
      Effect.mapError((e) => fail("Remote", `the checkpoint of step ${step} (${saved}) could not be downloaded from ${url} (${from}): ${e.message}`)),
    )
    const state = yield* Effect.try({
      try: () => Checkpoint.decode(bytes),
      catch: (e) => fail("State", `${saved} from ${url} is not a gyre state file: ${e instanceof Error ? e.message : String(e)}`),
    })
    return { state, file: saved }
  })

/** The run's base model, as its config names it or its env declares it. */
const runBaseModel = (dir: string) =>
  Effect.gen(function* () {
    const config = yield* readConfig(dir)
    if (config.baseModel !== undefined) return config.baseModel
    if (config.model !== undefined) return config.model
    const spec = config.envSpec ?? config.env
    if (spec === undefined) return undefined
    const { loadEnv } = yield* Effect.promise(() => import("./LoadEnv.ts"))
    const source = yield* loadEnv(spec).pipe(Effect.option)
    if (Option.isNone(source)) return undefined
    return Env.members(source.value)[0]?.[0].baseModel
  }).pipe(Effect.catchDefect(() => Effect.succeed(undefined)))

/**
 * Writes the LoRA adapter of a run's checkpoint (the last, or `step`'s) to `out` in PEFT
 * layout. Fails with `ExportError`: no checkpoint (saying so), no such step (listing
 * the saved ones), a checkpoint on a server, or a state file that is not a LoRA adapter.
 * @since 0.1.0 @category exporting
 */
export const exportRun = Effect.fn("Export.exportRun")(function* (dir: string, options: ExportOptions) {
  const files = RunFolder.paths(dir)
  if (!(yield* isFolder(dir).pipe(Effect.mapError((e) => fail("RunFolder", `cannot look at ${dir}: ${PlatformFs.messageOf(e)}`))))) {
    return yield* fail("RunFolder", `${dir} is not a folder: give a run folder, e.g. runs/math-2026-11-29T12-00-00`)
  }
  const rows = yield* RunFolder.readCheckpoints(files).pipe(Effect.mapError((e) => fail("RunFolder", e.message)))
  if (rows.length === 0) {
    return yield* fail(
      "NoCheckpoint",
      `${dir} has no checkpoint (${(yield* PlatformFs.exists(files.checkpoints)) ? "checkpoints.jsonl lists none" : "no checkpoints.jsonl"}): ` +
        "a run saves one every --save-every steps and at its last step; continue it with `run --resume " + dir + "` to save one",
    )
  }
  const row = options.step === undefined ? rows[rows.length - 1]! : [...rows].reverse().find((r) => r.step === options.step)
  if (row === undefined) {
    return yield* fail("NoCheckpoint", `${dir} has no checkpoint of step ${options.step}; --step must be one of ${[...new Set(rows.map((r) => r.step))].join(", ")}`)
  }
  const { path: saved, step } = row
  if (saved.startsWith("bt://")) {
    const got = yield* LoopsCheckpoints.exportCheckpoint(saved, options.out, { runDir: dir }).pipe(Effect.mapError((e) => fail("Remote", `the checkpoint of step ${step}: ${e.message}`)))
    return { step, checkpoint: saved, files: got.files, tensors: got.tensors } satisfies ExportResult
  }
  const { file, state } = saved.startsWith("tinker://") ? yield* downloadState(dir, step, saved, options.backend, options.retry) : yield* localState(files.state, row)
  const baseModel = options.baseModel ?? (yield* runBaseModel(dir)) ?? "gyre/models/base"
  const adapter = peftAdapter(state, baseModel)
  if (typeof adapter === "string") return yield* fail("State", `${file} ${adapter}`)
  const safetensors = Path.join(options.out, "adapter_model.safetensors")
  const config = Path.join(options.out, "adapter_config.json")
  yield* Effect.flatMap(PlatformFs.current, (fs) => fs.makeDirectory(options.out, { recursive: true })).pipe(
    Effect.mapError((e) => fail("Write", `${options.out}: ${PlatformFs.messageOf(e)}`)),
  )
  const metadata = { format: "pt", "gyre.run": Path.basename(Path.resolve(dir)), "gyre.step": String(step) }
  yield* RunLog.writeAtomic(safetensors, encodeSafetensors(adapter.tensors, metadata)).pipe(Effect.mapError((e) => fail("Write", e.message)))
  yield* RunLog.writeAtomic(config, JSON.stringify(adapter.config, null, 2) + "\n").pipe(Effect.mapError((e) => fail("Write", e.message)))
  return { step, checkpoint: file, files: [safetensors, config], tensors: Object.keys(adapter.tensors).length } satisfies ExportResult
})
