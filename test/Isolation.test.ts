/**
 * Test files share their worker's modules (vitest.config.ts, `isolate: false`), so a file
 * that replaces a module or a global for the whole file must be listed there to run alone;
 * else the replacement leaks into the files after it in the same worker.
 */
import * as Fs from "node:fs"
import * as Path from "node:path"
import { assert, describe, it } from "@effect/vitest"

const ROOT = Path.resolve(import.meta.dirname, "..")
const REPLACES = /\bvi\.(mock|doMock|stubGlobal|stubEnv)\(/

const testFiles = (dir: string): Array<string> =>
  Fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const path = Path.join(dir, e.name)
    return e.isDirectory() ? testFiles(path) : e.name.endsWith(".test.ts") ? [path] : []
  })

describe("test isolation", () => {
  it("every test file that replaces a module or global is listed as isolated in vitest.config.ts", () => {
    const config = Fs.readFileSync(Path.join(ROOT, "vitest.config.ts"), "utf8")
    const isolated = /const ISOLATED = \[([^\]]*)\]/.exec(config)?.[1] ?? ""
    const replacing = testFiles(Path.join(ROOT, "test"))
      .filter((f) => REPLACES.test(Fs.readFileSync(f, "utf8")))
      .map((f) => Path.relative(ROOT, f).split(Path.sep).join("/"))
    assert.include(replacing, "test/run/RunLog.test.ts")
    for (const f of replacing) assert.include(isolated, `"${f}"`, `${f} replaces a module or global: add it to ISOLATED in vitest.config.ts`)
  })
})
