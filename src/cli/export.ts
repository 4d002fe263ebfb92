/**
 * `gyre export`: writes a run's LoRA adapter in PEFT's layout (`Export.exportRun`), or
 * downloads a Loops checkpoint (`bt://loops:...`) file by file.
 */
import { Console, Effect, Option } from "effect"
import { Argument, Command, Flag } from "effect/cli"
import * as LoopsCheckpoints from "../backends/loops/Checkpoints.ts"
import { ExportError, exportRun } from "../app/Export.ts"

/**
 * `export <run-folder> [--step N] --out DIR [--base-model NAME] [--backend URL]`.
 * @since 0.1.0 @category commands
 */
export const exportCommand = Command.make(
  "export",
  {
    dir: Argument.String("run-folder").pipe(Argument.withDescription("a run folder, e.g. runs/math-2026-11-29T12-00-00, or a Loops checkpoint bt://loops:<run_id>/(weights|sampler_weights)/<name>")),
    step: Flag.Int("step").pipe(Flag.withDescription("the step whose checkpoint to export (default: the last checkpoint)"), Flag.optional),
    out: Flag.String("out").pipe(Flag.withDescription("folder to write adapter_model.safetensors and adapter_config.json to")),
    baseModel: Flag.String("base-model").pipe(Flag.withDescription("base_model_name_or_path in adapter_config.json (default: the run's base model)"), Flag.optional),
    backend: Flag.String("backend").pipe(
      Flag.withDescription("the training server of a run trained over HTTP, whose checkpoints (tinker://...) are downloaded from it (default: TINKER_BASE_URL)"),
      Flag.optional,
    ),
  },
  ({ backend, baseModel, dir, out, step }) =>
    (dir.startsWith("bt://")
      ? LoopsCheckpoints.exportCheckpoint(dir, out).pipe(
        Effect.mapError((e) => new ExportError({ reason: "Remote", message: e.message })),
        Effect.map((r) => `wrote ${r.files.length} file${r.files.length === 1 ? "" : "s"} of ${dir} to ${out} (${r.tensors} tensors)`),
      )
      : exportRun(dir, { out, step: Option.getOrUndefined(step), baseModel: Option.getOrUndefined(baseModel), backend: Option.getOrUndefined(backend) }).pipe(
        Effect.map((r) => `wrote ${r.files.join(" and ")} (${r.tensors} tensors, step ${r.step})`),
      )).pipe(
      Effect.flatMap((line) => Console.log(line)),
      Effect.catchTag("ExportError", (e) =>
        Console.error(`error: ${e.message}`).pipe(Effect.andThen(Effect.sync(() => {
          process.exitCode = 1
        })))),
    ),
).pipe(Command.withDescription("Write a run's LoRA adapter in PEFT layout (adapter_model.safetensors, adapter_config.json)"))
