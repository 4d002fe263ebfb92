/**
 * Resolves an env as a run names it (`<env>` on the command line): a name in gyre's
 * `envs/` or a path to a user's module whose default export is an `Env` (or an
 * `Env.mixture`). The module may be TypeScript or JavaScript, in an ESM or a CommonJS
 * folder.
 *
 * @since 0.1.0
 */
import * as Fs from "node:fs"
import Module, { createRequire } from "node:module"
import * as Path from "node:path"
import { pathToFileURL } from "node:url"
import { Effect, Option } from "effect"
import * as PlatformFs from "../platform/FileSystem.ts"
import * as Env from "../vocabulary/Env.ts"
import { compiled, envsDir, packageRoot } from "../Paths.ts"
import { installAdvice, missingPackageOf } from "./MissingPackage.ts"

const EXT = compiled ? /\.js$/ : /\.ts$/

/** Names of the envs shipped in gyre's `envs/`. */
export const availableEnvs = (): Array<string> =>
  // sync: cli/run.ts and cli/eval.ts call it while their modules load (a flag's description), outside any Effect
  Fs.existsSync(envsDir)
    ? Fs.readdirSync(envsDir).filter((f) => EXT.test(f) && !f.startsWith("_") && !f.endsWith(".d.ts")).map((f) => f.replace(EXT, "")).sort()
    : []

/** A path to a module rather than a name in envs/. */
export const isPath = (s: string) => s.includes("/") || s.includes("\\") || /\.(ts|mts|cts|js|mjs|cjs)$/.test(s)

/** The file an env spec names: a shipped env's module, or the user's path made absolute. */
export const envFile = (spec: string): string => isPath(spec) ? Path.resolve(spec) : Path.join(envsDir, `${spec}${compiled ? ".js" : ".ts"}`)

const realDir = (file: string) => Effect.flatMap(PlatformFs.current, (fs) => fs.realPath(Path.dirname(file))).pipe(Effect.orElseSucceed(() => Path.dirname(file)))

/** The folder of the package that `name` resolves to from `fromFile`, or undefined when it does not resolve. */
const resolvePackage = (name: string, fromFile: string): Effect.Effect<string | undefined> =>
  Effect.gen(function* () {
    const resolved = yield* Effect.try(() => createRequire(fromFile).resolve(name)).pipe(Effect.option)
    if (Option.isNone(resolved)) return undefined
    const fs = yield* PlatformFs.current
    // walk up to the package's own package.json (one that cannot be read is passed by)
    for (let dir = yield* realDir(resolved.value); ; dir = Path.dirname(dir)) {
      const json = yield* fs.readFileString(Path.join(dir, "package.json")).pipe(Effect.flatMap((text) => Effect.try(() => JSON.parse(text) as { name?: unknown })), Effect.option)
      if (Option.isSome(json) && json.value.name === name) return dir
      if (Path.dirname(dir) === dir) return undefined
    }
  })

/** The version in a package folder's package.json ("(version unknown)" when it cannot be read). */
const versionAt = (dir: string) =>
  Effect.flatMap(PlatformFs.current, (fs) => fs.readFileString(Path.join(dir, "package.json"))).pipe(
    Effect.flatMap((text) => Effect.try(() => (JSON.parse(text) as { version?: unknown }).version)),
    Effect.map((v) => (typeof v === "string" ? v : "(version unknown)")),
    Effect.orElseSucceed(() => "(version unknown)"),
  )

/**
 * Copies of `gyre` or `effect` that the user's module would load besides the ones this
 * command runs on: each is named with both folders and how to fix it. An env made by
 * another copy of gyre, or with another copy of effect, does not work with this runner.
 */
export const duplicateCopies = Effect.fn("LoadEnv.duplicateCopies")(function* (file: string) {
  const out: Array<string> = []
  const here = Path.join(packageRoot, "package.json")
  for (const name of ["gyre", "effect"] as const) {
    const mine = name === "gyre" ? yield* realDir(here) : yield* resolvePackage(name, here)
    const theirs = yield* resolvePackage(name, file)
    if (mine !== undefined && theirs !== undefined && mine !== theirs) {
      out.push(
        `${file} loads ${name} ${yield* versionAt(theirs)} from ${theirs}, but this gyre command runs on ${name} ${yield* versionAt(mine)} from ${mine}: two copies of ${name} do not mix. ` +
          `Run gyre from the project that holds the env (npx gyre ...), and keep one copy: \`npm dedupe\`, ` +
          (name === "effect" ? "and one effect in your project (gyre takes effect as a peer: your project's own copy)" : "and gyre installed once (a dependency of your project, not also a global install)"),
      )
    }
  }
  return out
})

/** Whether a file is a CommonJS module: `.cts`/`.cjs`, or a `.ts`/`.js` whose nearest package.json is not `"type": "module"`. */
const isCommonJs = (file: string) =>
  Effect.gen(function* () {
    if (/\.(cts|cjs)$/.test(file)) return true
    if (/\.(mts|mjs)$/.test(file)) return false
    const fs = yield* PlatformFs.current
    for (let dir = Path.dirname(file); ; dir = Path.dirname(dir)) {
      const pj = Path.join(dir, "package.json")
      // as existsSync: a package.json that cannot be looked at is not there
      if (yield* PlatformFs.exists(pj)) {
        const text = yield* fs.readFileString(pj).pipe(Effect.option)
        if (text._tag === "None") return true
        try {
          return (JSON.parse(text.value) as { type?: unknown }).type !== "module"
        } catch {
          return true
        }
      }
      if (Path.dirname(dir) === dir) return true
    }
  })

let esmLoader: Promise<void> | undefined
/**
 * Compiled gyre under plain node loads an ESM TypeScript env with tsx's ESM loader,
 * registered once, so the env shares this process's modules (one `effect`, one `gyre`).
 * Source gyre already runs under tsx.
 */
const typescriptEsmLoader = (): Promise<void> =>
  (esmLoader ??= compiled ? import("tsx/esm/api").then((esm) => void esm.register()) : Promise.resolve())

let cjsHook = false
/**
 * A CommonJS TypeScript env (and the `.ts` files it requires) is compiled with esbuild
 * and run by node's own `require`, so its `require("effect")` and `require("gyre")` get
 * the very modules this command runs on. (tsx's CommonJS loader would recompile those
 * ES modules into second copies, whose Schemas and Envs do not mix with these.)
 */
const installCommonJsTypeScript = () => {
  if (cjsHook) return
  cjsHook = true
  const require = createRequire(import.meta.url)
  const esbuild = require(require.resolve("esbuild", { paths: [Path.dirname(require.resolve("tsx"))] })) as {
    readonly transformSync: (code: string, options: Record<string, unknown>) => { readonly code: string }
  }
  const extensions = (Module as unknown as { _extensions: Record<string, (module: { _compile: (code: string, file: string) => void }, file: string) => void> })._extensions
  const compile = (module: { _compile: (code: string, file: string) => void }, file: string) =>
    // sync: node's require calls this hook synchronously
    module._compile(esbuild.transformSync(Fs.readFileSync(file, "utf8"), { loader: "ts", format: "cjs", sourcefile: file, target: "node20", sourcemap: "inline" }).code, file)
  extensions[".ts"] = compile
  extensions[".cts"] = compile
}

/** Imports the module `file` (`commonJs`: a CommonJS TypeScript module, run by node's require). */
const importModule = async (file: string, commonJs: boolean): Promise<Record<string, unknown>> => {
  if (commonJs) {
    installCommonJsTypeScript()
    const exports = createRequire(file)(file) as unknown
    return { default: exports }
  }
  if (/\.(ts|mts|cts)$/.test(file)) await typescriptEsmLoader()
  return import(pathToFileURL(file).href) as Promise<Record<string, unknown>>
}

/** The env in a module: its default export (also as CommonJS `module.exports` or `exports.default`). */
const defaultExport = (mod: Record<string, unknown>): unknown => {
  const value = mod["default"]
  if (Env.isEnv(value) || Env.isMixture(value)) return value
  // CommonJS seen from ESM: `exports.default = env` arrives as default.default
  const inner = typeof value === "object" && value !== null ? (value as Record<string, unknown>)["default"] : undefined
  if (Env.isEnv(inner) || Env.isMixture(inner)) return inner
  return value
}

/** The first lines of a load failure (a syntax error's message and its location), without the stack. */
const firstLines = (e: unknown) =>
  (e instanceof Error ? e.message : String(e)).split("\n").map((l) => l.trim()).filter((l) => l.length > 0).slice(0, 2).join(" ")

/** For an import of a package the project lacks: the command that installs it. */
const missingAdvice = (e: unknown) => {
  const name = missingPackageOf(e)
  return name === undefined ? "" : `; ${name} is not installed: ${installAdvice(name)}`
}

const describe = (value: unknown) =>
  value === undefined ? "no default export" : value === null ? "null" : Array.isArray(value) ? "an array" : typeof value === "object" ? `an object with keys ${Object.keys(value).slice(0, 5).join(", ") || "(none)"}` : typeof value

/** Loads an env by name or path, failing with one message that names the file and says what to do. */
export const loadEnv = (spec: string) =>
  Effect.gen(function* () {
    const file = envFile(spec)
    // as existsSync: a file that cannot be looked at is not there
    if (!(yield* PlatformFs.exists(file))) {
      const names = availableEnvs()
      return yield* new Env.EnvError({
        env: spec,
        reason: "NotFound",
        message: isPath(spec)
          ? `no such file: ${file}`
          : `unknown env "${spec}". Available: ${names.join(", ") || "(none)"}; or pass a path to your own module, e.g. ./my-env.ts`,
      })
    }
    const copies = yield* duplicateCopies(file)
    const commonJs = /\.(ts|cts)$/.test(file) && compiled && (yield* isCommonJs(file))
    const mod = yield* Effect.tryPromise({
      try: () => importModule(file, commonJs),
      catch: (e) =>
        new Env.EnvError({
          env: spec,
          reason: "InvalidDefinition",
          message: `${file} failed to load: ${firstLines(e)}${missingAdvice(e)}${copies.length > 0 ? `; ${copies.join("; ")}` : ""}`,
        }),
    })
    const value = defaultExport(mod)
    if (!Env.isEnv(value) && !Env.isMixture(value)) {
      return yield* new Env.EnvError({
        env: spec,
        reason: "InvalidDefinition",
        message: `${file} must have a default export made with Env.make({...}) or Env.mixture(...); found ${describe(value)}`,
      })
    }
    if (copies.length > 0) {
      return yield* new Env.EnvError({ env: spec, reason: "InvalidDefinition", message: copies.join("; ") })
    }
    return value
  })
