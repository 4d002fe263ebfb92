/**
 * What to do when an env module imports a package the user's project lacks: the shipped
 * agent envs need their agent libraries (`ai`, `openai`, ...), which gyre declares as
 * optional peers rather than installing them into every project.
 *
 * @since 0.1.0
 */
import * as Fs from "node:fs"
import * as Path from "node:path"
import { packageRoot } from "../Paths.ts"

/** gyre's declared peers and their ranges, read once. */
const peers: Record<string, string> = (() => {
  try {
    // sync: runs while this module loads (a constant), outside any Effect
    const json = JSON.parse(Fs.readFileSync(Path.join(packageRoot, "package.json"), "utf8")) as { peerDependencies?: Record<string, string> }
    return json.peerDependencies ?? {}
  } catch {
    return {}
  }
})()

/** The package an import failure names (`Cannot find package 'ai'` / `Cannot find module 'zod'`), if it is one. */
export const missingPackageOf = (e: unknown): string | undefined => {
  const code = (e as { code?: unknown } | null)?.code
  if (code !== "ERR_MODULE_NOT_FOUND" && code !== "MODULE_NOT_FOUND") return undefined
  const m = /Cannot find (?:package|module) '([^']+)'/.exec(e instanceof Error ? e.message : String(e))
  if (m === null || m[1]!.startsWith(".") || Path.isAbsolute(m[1]!)) return undefined
  // the package's name: "@scope/name" or "name", without a subpath
  const parts = m[1]!.split("/")
  return m[1]!.startsWith("@") ? parts.slice(0, 2).join("/") : parts[0]
}

/** The install command for a missing package, with gyre's peer range when gyre declares it. */
export const installAdvice = (name: string): string => {
  const range = peers[name]
  return range === undefined
    ? `install it in your project: npm install ${name}`
    : `it is an optional peer of gyre, needed only by envs that use it: npm install "${name}@${range}"`
}
