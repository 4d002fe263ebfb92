/**
 * Tests pass on a loaded machine: no test or hook sets a wall-clock limit of its own (the
 * argument of `it`/`test`/`beforeAll`..., a number or `{ timeout }`), and the one
 * limit they share, in vitest.config.ts, is long enough to catch only a hang. A machine
 * busy with other jobs stretches every test several times over, and a 30-second limit
 * that holds on a quiet machine then fails a test that was only slow. Read from the source
 * text: a call's closing `}` or `})` (optionally `.pipe(Effect.scoped)`) followed by a
 * number of milliseconds.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Fs from "node:fs"
import * as Path from "node:path"

const ROOT = Path.resolve(import.meta.dirname, "..")
const TEST = Path.join(ROOT, "test")

/** The shortest limit that only a hang reaches, in milliseconds. */
const HANG_ONLY = 5 * 60_000

const testFiles = (dir: string): Array<string> =>
  Fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const full = Path.join(dir, e.name)
    if (e.isDirectory()) return e.name === "fixtures" ? [] : testFiles(full)
    return e.name.endsWith(".ts") ? [full] : []
  })

// `}, 30_000)`, `}), 60_000)`, `}).pipe(Effect.scoped), 30_000)`, the same over three lines,
// `}), { timeout: 20_000 })`, and `it("...", { timeout: 20_000 }, () => ...)`
const LIMITS = [
  /^\s*\}\)?(?:\.pipe\(Effect\.scoped\))?, ([\d_]+)\)\s*$/gm,
  /\}\)?(?:\.pipe\(Effect\.scoped\))?,\n\s*([\d_]+),\n\s*\)/g,
  /\}\)?, \{ timeout: ([\d_]+) \}\)\s*$/gm,
  /\b(?:it|test)(?:\.\w+)*\([^\n]*?, \{ timeout: ([\d_]+) \}, /g,
]

const millis = (text: string) => Number(text.replaceAll("_", ""))

describe("time limits", () => {
  it("vitest's shared limit catches only a hang", () => {
    const config = Fs.readFileSync(Path.join(ROOT, "vitest.config.ts"), "utf8")
    for (const key of ["testTimeout", "hookTimeout"]) {
      const value = config.match(new RegExp(`${key}: ([\\d_]+)`))?.[1]
      assert.isDefined(value, `vitest.config.ts sets ${key}`)
      assert.isAtLeast(millis(value!), HANG_ONLY, `vitest.config.ts's ${key}`)
    }
  })

  it("no test or hook sets a shorter wall-clock limit of its own", () => {
    // (this file's own examples of what is refused aside)
    const found = testFiles(TEST).filter((file) => file !== import.meta.filename).flatMap((file) => {
      const text = Fs.readFileSync(file, "utf8")
      return LIMITS.flatMap((re) =>
        [...text.matchAll(re)]
          .filter((m) => millis(m[1]!) >= 1_000 && millis(m[1]!) < HANG_ONLY)
          .map((m) => `${Path.relative(ROOT, file)}:${text.slice(0, m.index).split("\n").length + (m[0].startsWith("\n") ? 1 : 0)}: ${m[1]} ms`)
      )
    })
    assert.deepStrictEqual(found, [], "drop these limits: vitest.config.ts's testTimeout (a hang-only limit) applies")
  })
})
