/**
 * Every command's error output has one format: `error: <message>` on stderr and exit code
 * 1, whether the command reports its own failure (`report`), leaves it to the program
 * runner (`serve`), or the command line is refused.
 */
import { assert, describe, it } from "@effect/vitest"
import { exited, startCommand } from "./Processes.ts"

/** Runs `gyre <args>` to its end: its exit code and output. */
const gyre = async (args: ReadonlyArray<string>) => {
  const { child, output } = startCommand(undefined, args)
  const code = await exited(child)
  return { code, out: output() }
}

describe("error output", () => {
  it("two failing commands print their failure the same way", async () => {
    const [serve, report, flag] = await Promise.all([
      gyre(["serve", "--model", "no-such-model"]),
      gyre(["report", "no-such-run-folder"]),
      // a command line the CLI refuses is answered once, not again by the program runner
      gyre(["serve", "--port", "abc"]),
    ])
    for (const [what, r] of [["serve", serve], ["report", report], ["flag", flag]] as const) {
      assert.strictEqual(r.code, 1, `${what}: ${r.out}`)
      const lines = r.out.split("\n").filter((l) => l.trim() !== "")
      assert.lengthOf(lines, 1, `${what}: ${r.out}`)
      assert.match(lines[0] ?? "", /^error: /, `${what}: ${r.out}`)
      assert.notMatch(r.out, /Error:|ERROR/, `${what}: ${r.out}`)
    }
    assert.include(serve.out, "error: --model no-such-model: no such folder")
    assert.include(report.out, "error: no-such-run-folder")
    assert.include(flag.out, "error: Invalid value for flag --port")
  })
})
