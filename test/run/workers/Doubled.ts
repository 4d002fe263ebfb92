/**
 * Test helper: 2 episode workers on `ThreadEnvs.ts`, over the tiny embedded model whose
 * sampler a test double wraps (the double gets the model's sampler and gives its own).
 */
import * as Path from "node:path"
import { Layer } from "effect"
import { Local } from "../../../src/backends/local/index.ts"
import * as RunLog from "../../../src/folder/RunLog.ts"
import * as Pool from "../../../src/run/workers/Pool.ts"
import type { Sampler } from "../../../src/services/Sampler.ts"
import { TINY } from "../../envs/vowels.ts"

const MODULE = Path.resolve(import.meta.dirname, "ThreadEnvs.ts")

/** The workers playing `ThreadEnvs`'s export `exportName`, sampling through `double`, for a run in `dir`. */
export const workersOver = (dir: string, exportName: string, double: Layer.Layer<Sampler, never, Sampler>) => {
  const local = Layer.fresh(Local.layer({ config: TINY, seed: 0, stateDir: RunLog.paths(dir).state, lora: { rank: 4, alpha: 8, targets: ["q", "v"] } }))
  return Layer.provideMerge(Pool.layer({ cores: 2, env: { module: MODULE, exportName }, tokenizer: { kind: "char" } }), Layer.provideMerge(double, local))
}
