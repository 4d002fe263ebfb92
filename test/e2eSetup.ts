/**
 * The e2e project's global setup: one build of gyre (`tsc -p tsconfig.build.json` into
 * dist/) before its files start gyre's processes, which run the built JavaScript
 * (`node dist/src/cli/main.js <command>`) as an installed gyre does, not the TypeScript
 * source through tsx. The build starts from an empty dist/, so no file of an earlier layout
 * is left to load.
 */
import { execFileSync } from "node:child_process"
import * as Fs from "node:fs"
import * as Path from "node:path"

export default function setup() {
  const root = Path.resolve(import.meta.dirname, "..")
  Fs.rmSync(Path.join(root, "dist"), { recursive: true, force: true })
  execFileSync(process.execPath, [Path.join(root, "node_modules", "typescript", "lib", "tsc.js"), "-p", "tsconfig.build.json"], { cwd: root, stdio: "inherit" })
}
