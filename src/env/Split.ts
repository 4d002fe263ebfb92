/**
 * The train/eval split of a problem: a hash of the env's name and the decoded problem,
 * compared with `eval.heldOut`. Separate from `Tasks.ts` because both the draws and the
 * row index behind them (`RowIndex.ts`) decide splits with it.
 *
 * @since 0.1.0
 */
import type { Env } from "./Definition.ts"
import { jsonHash } from "./JsonHash.ts"

/** @since 0.1.0 @category models */
export type Split = "train" | "eval"

/** `eval.heldOut`, default 0.1 */
export const heldOutFraction = (env: Env<any, any>) => env.eval?.heldOut ?? 0.1

/**
 * Which split a (decoded) problem belongs to: a hash of the env's name and the problem's
 * JSON, compared with `eval.heldOut`. The same problem is always in the same split, in
 * every run and every seed. With `heldOut: 0` every problem is in both.
 * @since 0.1.0 @category accessors
 */
export const splitOf = (env: Env<any, any>, problem: unknown): Split => splitOfHash(heldOutFraction(env), jsonHash(`${env.name}:`, problem))

/**
 * The split of a problem whose hash (of the env's name and its JSON, unsigned) is `hash`.
 * @since 0.1.0 @category accessors
 */
export const splitOfHash = (heldOut: number, hash: number): Split => (hash % 10_000) / 10_000 < heldOut ? "eval" : "train"

