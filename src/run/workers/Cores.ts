/**
 * `--cores`: how many cores play episodes, and which envs the episode workers can play.
 *
 * @since 0.1.0
 */
import * as Os from "node:os"
import { Schema } from "effect"
import type * as Env from "../../vocabulary/Env.ts"

/**
 * `--cores`: a count of cores (1: everything on the main thread, the default) or `auto`
 * (every core the process may use).
 * @since 0.1.0 @category models
 */
export const Cores = Schema.Union([Schema.Int.check(Schema.isGreaterThanOrEqualTo(1)), Schema.Literal("auto")])
export type Cores = typeof Cores.Type

/** Whether a value is a `--cores` setting (a whole number of 1 or more, or `auto`). @since 0.1.0 @category guards */
export const isCores: (u: unknown) => u is Cores = Schema.is(Cores)

/** `--cores` as typed: a whole number of 1 or more, or `auto`; undefined for anything else. @since 0.1.0 @category utils */
export const parseCores = (text: string): Cores | undefined => {
  const t = text.trim()
  if (t === "auto") return "auto"
  return /^\d+$/.test(t) && Number(t) >= 1 ? Number(t) : undefined
}

/** The worker threads `cores` asks for: `auto` is every core the process may use. @since 0.1.0 @category utils */
export const threadsOf = (cores: Cores | undefined): number => (cores === undefined ? 1 : cores === "auto" ? Os.availableParallelism() : cores)

/**
 * What to tell a run that asks for more worker threads than the cores the process may use
 * (`available`), or undefined when it does not. Not refused: episodes that wait on I/O
 * (agents, sandboxes) can gain from more threads than cores.
 * @since 0.1.0 @category utils
 */
export const oversubscribed = (threads: number, available: number = Os.availableParallelism()): string | undefined =>
  threads <= available
    ? undefined
    : `--cores ${threads} starts ${threads} episode worker threads, and this process may use ${available} core${available === 1 ? "" : "s"}: the threads share them, each with a tokenizer and an env of its own (--cores auto starts ${available})`

/**
 * Why groups of `env` stay on the main thread, or undefined when the workers (which loaded
 * the envs `loaded`) can play them. Game envs call their frozen players, and envs with
 * `services` use layers the run builds once: both live on the main thread. (Agent envs
 * play on workers: each worker serves its agents an endpoint of its own.)
 * @since 0.1.0 @category utils
 */
export const offWorkers = (env: Env.AnyEnv, loaded: ReadonlySet<string>): string | undefined =>
  env.game !== undefined
    ? "a game env's frozen players are the main thread's"
    : env.services !== undefined
    ? "its services (Env.make({ services })) are built once, on the main thread"
    : !loaded.has(env.name)
    ? `the workers' env module has no env named ${env.name} (give the module that defines it)`
    : undefined
