/**
 * docs/troubleshooting.md lists what gyre prints when it tells a user to change something.
 * Every message it lists (each code span of a table's first column, its varying parts
 * written `…`) still occurs in gyre's source, piece by piece: a message reworded or
 * removed fails here, naming the page's line.
 */
import * as Fs from "node:fs"
import * as Path from "node:path"
import { assert, describe, it } from "@effect/vitest"

const root = Path.resolve(import.meta.dirname, "../..")

const sourceFiles = (dir: string): Array<string> =>
  Fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? sourceFiles(Path.join(dir, e.name)) : e.name.endsWith(".ts") ? [Path.join(dir, e.name)] : []
  )

/** The messages of the page's tables: line number, and the fixed pieces of each message. */
const listed = (): Array<{ readonly line: number; readonly pieces: ReadonlyArray<string> }> =>
  Fs.readFileSync(Path.join(root, "docs/troubleshooting.md"), "utf8").split("\n").flatMap((text, i) => {
    if (!text.startsWith("| `")) return []
    const first = text.split(" | ")[0]!
    const pieces = [...first.matchAll(/`([^`]+)`/g)].flatMap((m) => m[1]!.split("…")).map((p) => p.trim()).filter((p) => p.length >= 8)
    return [{ line: i + 1, pieces }]
  })

describe("docs/troubleshooting.md", () => {
  it("lists only messages that gyre's source still prints", () => {
    const source = [...sourceFiles(Path.join(root, "src")), ...sourceFiles(Path.join(root, "rewards"))].map((f) => Fs.readFileSync(f, "utf8")).join("\n")
    const rows = listed()
    assert.isAtLeast(rows.length, 30)
    const missing = rows.flatMap((r) => r.pieces.filter((p) => !source.includes(p)).map((p) => `docs/troubleshooting.md:${r.line}: "${p}"`))
    assert.deepStrictEqual(missing, [], "messages no longer in src/: update the page")
  })

  it("every row says why and what to change", () => {
    for (const text of Fs.readFileSync(Path.join(root, "docs/troubleshooting.md"), "utf8").split("\n").filter((l) => l.startsWith("| `"))) {
      const cells = text.split(" | ")
      assert.isAtLeast(cells.length, 3, text)
      assert.isAbove(cells.at(-1)!.replace(/\|$/, "").trim().length, 3, text)
    }
  })
})
