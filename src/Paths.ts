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
    if (Fs.existsSync(file)) {
      try {
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

/** The embedded base model shipped with gyre (`<package>/models/base`). */
export const defaultModelDir: string = Path.join(packageRoot, "models", "base")

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
    return String((JSON.parse(Fs.readFileSync(Path.join(packageRoot, "package.json"), "utf8")) as { version?: unknown }).version ?? "0.0.0")
  } catch {
    return "0.0.0"
  }
})()
