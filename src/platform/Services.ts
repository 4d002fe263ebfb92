/**
 * The services `effect/cli`'s `Command.run` needs on Node: `FileSystem`, `Path`,
 * `Terminal` and `Stdio` on Node's own modules, and a `ChildProcessSpawner` that refuses
 * (no gyre command starts a process through it).
 *
 * @since 0.1.0
 */
import { Effect, Layer, PlatformError } from "effect"
import { ChildProcessSpawner } from "effect/process"
import * as FileSystem from "./FileSystem.ts"
import * as Path from "./Path.ts"
import * as Stdio from "./Stdio.ts"
import * as Terminal from "./Terminal.ts"

/** A `ChildProcessSpawner` whose every spawn fails, saying that it is not supported. @since 0.1.0 @category layers */
export const noChildProcesses: Layer.Layer<ChildProcessSpawner.ChildProcessSpawner> = Layer.succeed(
  ChildProcessSpawner.ChildProcessSpawner,
  ChildProcessSpawner.make(() =>
    Effect.fail(PlatformError.badArgument({ module: "ChildProcessSpawner", method: "spawn", description: "starting a child process is not supported by gyre's Node platform" })),
  ),
)

/**
 * `FileSystem | Path | Terminal | Stdio | ChildProcessSpawner` for a command-line
 * program (`Command.run`).
 * @since 0.1.0 @category layers
 */
export const layer = Layer.mergeAll(FileSystem.layer, Path.layer, Terminal.layer, Stdio.layer, noChildProcesses)
