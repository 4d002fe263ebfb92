/**
 * Where the gyre package lies, so that its files (the embedded base model, envs/) are
 * found wherever the code runs: from a clone (`src/`) or from an install
 * (`node_modules/gyre/dist/src/`).
 *
 * @since 0.1.0
 */
import * as Fs from "node:fs"
import * as Path from "node:path"

const findRoot = (from: string): string => {
  for (let dir = from; ; dir = Path.dirname(dir)) {
    const file = Path.join(dir, "package.json")
    // sync: runs while this module loads (`packageRoot` is a constant), outside any Effect
    if (Fs.existsSync(file)) {
      try {
        // sync: as above, at module load
        if ((JSON.parse(Fs.readFileSync(file, "utf8")) as { name?: unknown }).name === "gyre") return dir
      } catch {
        // not a readable package.json: keep looking upwards
      }
    }
    // src/ in a clone, dist/src/ in an install
    if (Path.dirname(dir) === dir) return Path.resolve(from, import.meta.url.endsWith(".ts") ? ".." : "../..")
  }
}

/** The folder of gyre's own package.json. */
export const packageRoot: string = findRoot(import.meta.dirname)

/** The folder of the base models shipped with gyre (`<package>/models`). */
export const modelsDir: string = Path.join(packageRoot, "models")

/** The embedded base model shipped with gyre (`<package>/models/base`). */
export const defaultModelDir: string = Path.join(modelsDir, "base")

/** A model folder shipped with gyre, by name (`shippedModel("calculator")` is `<package>/models/calculator`). */
export const shippedModel = (name: string): string => Path.join(modelsDir, name)

/** The names of the base models shipped with gyre: the folders of `models/` that hold a `config.json`. */
export const shippedModels = (): ReadonlyArray<string> => {
  try {
    // sync: a public sync helper (gyre/embedded exports it) that env modules and error messages (`unknownModelMessage`) call outside any Effect
    return Fs.readdirSync(modelsDir, { withFileTypes: true })
      .filter((e) => e.isDirectory() && Fs.existsSync(Path.join(modelsDir, e.name, "config.json")))
      .map((e) => e.name)
      .sort()
  } catch {
    return []
  }
}

/**
 * The folder a `--model` value names: a path that exists (relative to the working
 * folder), else the shipped model of that name wherever the command runs; undefined when
 * it is neither.
 */
export const resolveModelDir = (given: string): string | undefined => {
  // sync: a plain function its callers use outside Effect code (app/Backend.ts picks a layer with it, error messages name models), as `shippedModels` below
  if (Fs.existsSync(given)) return given
  const bare = !given.includes("/") && !given.includes(Path.sep) && given !== "." && given !== ".."
  return bare && shippedModels().includes(given) ? shippedModel(given) : undefined
}

/** What to say when `--model` names neither a folder nor a shipped model: the names there are. */
export const unknownModelMessage = (given: string): string =>
  `--model ${given}: no such folder, and no model shipped with gyre has that name (shipped: ${shippedModels().join(", ")}); ` +
  "give a base model folder (config.json and weights.bin) or one of those names"

/** Whether this code runs compiled (from dist/) rather than as TypeScript source. */
export const compiled: boolean = !import.meta.url.endsWith(".ts")

/**
 * The envs shipped with gyre: the compiled ones when this code is compiled, else the
 * source, so that an env and the CLI always share one copy of gyre.
 */
export const envsDir: string = compiled ? Path.join(packageRoot, "dist", "envs") : Path.join(packageRoot, "envs")

/** gyre's version, from its package.json. */
export const version: string = (() => {
  try {
    // sync: runs while this module loads (`version` is a constant), outside any Effect
    return String((JSON.parse(Fs.readFileSync(Path.join(packageRoot, "package.json"), "utf8")) as { version?: unknown }).version ?? "0.0.0")
  } catch {
    return "0.0.0"
  }
})()
