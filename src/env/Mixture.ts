/**
 * Weighted mixtures of envs: each problem picks an env by weight from a seeded stream,
 * then a problem of that env. Separate because a mixture is a source of tasks made of
 * several envs, where everything else in `env/` is about one env.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import { type AnyEnv, isEnv } from "./Definition.ts"
import { random } from "../util/Random.ts"
import { problemAt, type Split } from "./Tasks.ts"

/** Weighted envs drawn from per problem. @since 0.1.0 @category models */
export interface Mixture {
  readonly "~gyre/Mixture": "~gyre/Mixture"
  readonly name: string
  readonly members: ReadonlyArray<readonly [AnyEnv, number]>
}

/**
 * A weighted mixture of envs: each problem picks an env with probability proportional
 * to its weight (seeded), then a problem of that env. Metrics are kept per env.
 * @since 0.1.0 @category constructors
 */
export const mixture = (name: string, members: ReadonlyArray<readonly [AnyEnv, number]>): Mixture => {
  if (members.length === 0) throw new TypeError(`Env.mixture(${JSON.stringify(name)}): give at least one env`)
  for (const [env, w] of members) {
    if (!isEnv(env)) throw new TypeError(`Env.mixture(${JSON.stringify(name)}): every member must be an Env`)
    if (!(w > 0 && Number.isFinite(w))) throw new TypeError(`Env.mixture(${JSON.stringify(name)}): weight of ${env.name} must be > 0`)
  }
  const names = new Set(members.map(([e]) => e.name))
  if (names.size !== members.length) throw new TypeError(`Env.mixture(${JSON.stringify(name)}): env names must be distinct`)
  return { "~gyre/Mixture": "~gyre/Mixture", name, members }
}

/** @since 0.1.0 @category guards */
export const isMixture = (u: unknown): u is Mixture =>
  typeof u === "object" && u !== null && (u as { "~gyre/Mixture"?: unknown })["~gyre/Mixture"] === "~gyre/Mixture"

/** An env or a mixture, seen as weighted members. @since 0.1.0 @category combinators */
export const members = (source: AnyEnv | Mixture): ReadonlyArray<readonly [AnyEnv, number]> =>
  isMixture(source) ? source.members : [[source, 1]]

/**
 * Task `index` of a seed from an env or mixture: the env is picked by weight from the
 * same seeded stream, so the sequence is stable.
 * @since 0.1.0 @category accessors
 */
export const taskAt = (
  source: AnyEnv | Mixture,
  options: { readonly seed: number; readonly index: number; readonly split: Split; readonly difficulty?: number },
) => {
  const ms = members(source)
  const total = ms.reduce((s, [, w]) => s + w, 0)
  // the member `u` falls on (the last one when rounding passes them all); one member needs no draw
  let u = ms.length === 1 ? 0 : random(`mixture/${options.split}/${options.seed}/${options.index}`).next() * total
  let chosen: AnyEnv | undefined
  for (const [env, w] of ms) {
    chosen = env
    if (u < w) break
    u -= w
  }
  if (chosen === undefined) throw new TypeError(`Env.taskAt: ${source.name} has no env`)
  const env = chosen
  return problemAt(env, options).pipe(Effect.map((t) => ({ ...t, envDef: env })))
}
