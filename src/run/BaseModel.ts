/**
 * Which base model a trainer trains, independent of where its folder lies. An embedded
 * model (`local:<folder>`) is known by the SHA-256 of its `weights.bin` (which records the
 * model's config too), so the model shipped with gyre is one model in every project that
 * installs it, and a copy of a model folder is the model it copies. Other backends name
 * their models by location-independent names already (`Qwen/Qwen3-8B`).
 *
 * @since 0.1.0
 */
import * as Crypto from "node:crypto"
import * as Path from "node:path"
import { Effect } from "effect"
import type * as RunFolder from "../folder/RunFolder.ts"
import * as PlatformFs from "../platform/FileSystem.ts"

/** The folder of an embedded model name (`local:<folder>`); undefined for a random or remote model. */
const folderOf = (model: string): string | undefined =>
  model.startsWith("local:") && model !== "local:random" ? model.slice("local:".length) : undefined

/**
 * `sha256:<hex>` of the weights of the embedded model `model` names, read now; undefined
 * for a model that is not an embedded folder, or whose weights cannot be read.
 * @since 0.1.0 @category accessors
 */
export const weightsDigest = (model: string): Effect.Effect<string | undefined> =>
  Effect.gen(function* () {
    const dir = folderOf(model)
    if (dir === undefined) return undefined
    const fs = yield* PlatformFs.current
    const weights = yield* fs.readFile(Path.join(dir, "weights.bin")).pipe(Effect.orElseSucceed(() => undefined))
    return weights === undefined ? undefined : `sha256:${Crypto.createHash("sha256").update(weights).digest("hex")}`
  })

/** A trainer record with the digest of its embedded model's weights, when there is one. @since 0.1.0 @category constructors */
export const withDigest = (record: RunFolder.TrainerRecord): Effect.Effect<RunFolder.TrainerRecord> =>
  Effect.map(weightsDigest(record.model), (weights) => (weights === undefined ? record : { ...record, weights }))

/**
 * Whether two trainer records train the same base model: by their weights' digests when
 * both are known (an older record without one is hashed from its folder, if that is
 * still there), else by name.
 * @since 0.1.0 @category predicates
 */
export const sameModel = (recorded: RunFolder.TrainerRecord, current: RunFolder.TrainerRecord): Effect.Effect<boolean> =>
  Effect.gen(function* () {
    const a = recorded.weights ?? (yield* weightsDigest(recorded.model))
    const b = current.weights ?? (yield* weightsDigest(current.model))
    return a !== undefined && b !== undefined ? a === b : recorded.model === current.model
  })

/** A trainer's base model for messages: its name, and its weights' digest (12 hex digits) when known. @since 0.1.0 @category formatting */
export const describe = (record: RunFolder.TrainerRecord): string =>
  record.weights === undefined ? record.model : `${record.model} (weights ${record.weights.slice(0, "sha256:".length + 12)})`
