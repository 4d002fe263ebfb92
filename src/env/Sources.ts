/**
 * Where an env's problems come from: a seeded generator (with the small deterministic
 * PRNG it is handed) or rows (an array, a JSONL file). Separate from the env definition
 * because sources are plain data a definition holds; how problems are drawn from them
 * into splits is `Tasks.ts`.
 *
 * @since 0.1.0
 */
import * as Fs from "node:fs"
import type { Effect } from "effect"

import type { Random } from "../util/Random.ts"

// ===== Sources =====

/** What a seeded generator gets for each problem. @since 0.1.0 @category models */
export interface GenerateContext {
  readonly random: Random
  readonly difficulty: number
  readonly index: number
}

/** @since 0.1.0 @category models */
export type Source<P> =
  | { readonly _tag: "Seeded"; readonly generate: (ctx: GenerateContext) => P | Effect.Effect<P> }
  | {
    readonly _tag: "Rows"
    readonly load: () => Array<unknown>
    readonly origin: string
    /** where row i came from, for error messages (default `<origin>[i]`) */
    readonly locate?: (index: number) => string
  }

/**
 * A seeded generator: problem i of seed s is always the same.
 * @since 0.1.0 @category constructors
 */
export const seeded = <P>(generate: (ctx: GenerateContext) => P | Effect.Effect<P>): Source<P> => ({ _tag: "Seeded", generate })

/** Problems from an array of rows, decoded with the env's problem Schema. @since 0.1.0 @category constructors */
export const rows = <P = unknown>(items: ReadonlyArray<unknown>): Source<P> => ({
  _tag: "Rows",
  load: () => [...items],
  origin: "rows",
})

/**
 * Problems from a JSONL file (one JSON object per line; blank lines skipped), decoded
 * with the env's problem Schema. Errors name the file and the line.
 * @since 0.1.0 @category constructors
 */
export const jsonl = <P = unknown>(path: string): Source<P> => {
  // the file line of each row, since blank lines are skipped
  const lines: Array<number> = []
  return {
    _tag: "Rows",
    origin: path,
    locate: (index) => `${path}:${lines[index] ?? "?"}`,
    load: () => {
      // sync: `Source.load` is a plain function (`() => Array<unknown>`), part of the public `Source` type that envs and users implement
      const text = Fs.readFileSync(path, "utf8")
      const out: Array<unknown> = []
      lines.length = 0
      text.split("\n").forEach((line, i) => {
        if (line.trim() === "") return
        try {
          out.push(JSON.parse(line))
          lines.push(i + 1)
        } catch (e) {
          throw new Error(`${path}:${i + 1}: not valid JSON (${(e as Error).message})`)
        }
      })
      return out
    },
  }
}
