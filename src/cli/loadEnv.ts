/**
 * Resolves `<env>` on the command line: a name in `envs/` or a path to a user's module
 * whose default export is an `Env` (or an `Env.mixture`).
 */
import * as Fs from "node:fs"
import * as Path from "node:path"
import { pathToFileURL } from "node:url"
import { Effect } from "effect"
import * as Env from "../Env.ts"

const ENVS_DIR = Path.resolve(import.meta.dirname, "../../envs")

/** Names of the envs shipped in `envs/`. */
export const availableEnvs = (): Array<string> =>
  Fs.existsSync(ENVS_DIR)
    ? Fs.readdirSync(ENVS_DIR).filter((f) => /\.(ts|js|mjs)$/.test(f) && !f.startsWith("_")).map((f) => f.replace(/\.(ts|js|mjs)$/, "")).sort()
    : []

/** A path to a module rather than a name in envs/. */
export const isPath = (s: string) => s.includes("/") || s.includes("\\") || /\.(ts|js|mjs)$/.test(s)

/** Loads an env by name or path, failing with a message that says what to do. */
export const loadEnv = (spec: string) =>
  Effect.gen(function* () {
    const file = isPath(spec) ? Path.resolve(spec) : Path.join(ENVS_DIR, `${spec}.ts`)
    if (!Fs.existsSync(file)) {
      const names = availableEnvs()
      return yield* new Env.EnvError({
        env: spec,
        reason: "NotFound",
        message: isPath(spec)
          ? `no such file: ${file}`
          : `unknown env "${spec}". Available: ${names.join(", ") || "(none)"}; or pass a path to your own module, e.g. ./my-env.ts`,
      })
    }
    const mod = yield* Effect.tryPromise({
      try: () => import(pathToFileURL(file).href) as Promise<Record<string, unknown>>,
      catch: (e) =>
        new Env.EnvError({ env: spec, reason: "InvalidDefinition", message: `${file} failed to load: ${e instanceof Error ? e.message : String(e)}` }),
    })
    const value = mod["default"]
    if (!Env.isEnv(value) && !Env.isMixture(value)) {
      return yield* new Env.EnvError({
        env: spec,
        reason: "InvalidDefinition",
        message: `${file} must have a default export made with Env.make({...}) or Env.mixture(...); found ${value === undefined ? "no default export" : typeof value}`,
      })
    }
    return value
  })
