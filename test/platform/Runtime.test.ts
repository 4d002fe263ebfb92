/**
 * gyre's `runMain`, in a real process (MainFixture.ts): SIGINT and SIGTERM interrupt the
 * program so its finalizers run, and the exit code says how it ended.
 */
import { spawn } from "node:child_process"
import * as Path from "node:path"
import { assert, describe, it } from "@effect/vitest"

const FIXTURE = Path.join(import.meta.dirname, "MainFixture.ts")

/** Runs the fixture in `mode`; `signal` is sent once it prints "ready". */
const run = (mode: string, signal?: NodeJS.Signals) =>
  new Promise<{ code: number | null; out: string }>((resolve) => {
    const child = spawn(process.execPath, ["--import", "tsx", FIXTURE, mode], { stdio: ["ignore", "pipe", "pipe"] })
    let out = ""
    let sent = false
    const collect = (d: Buffer) => {
      out += d
      if (signal !== undefined && !sent && out.includes("ready")) {
        sent = true
        child.kill(signal)
      }
    }
    child.stdout.on("data", collect)
    child.stderr.on("data", collect)
    child.on("exit", (code) => resolve({ code, out }))
  })

describe("platform runMain", () => {
  it("SIGINT interrupts the program: its finalizer runs and the exit code is 130", async () => {
    const { code, out } = await run("wait", "SIGINT")
    assert.strictEqual(code, 130, out)
    assert.include(out, "finalized")
  })

  it("SIGTERM does the same", async () => {
    const { code, out } = await run("wait", "SIGTERM")
    assert.strictEqual(code, 130, out)
    assert.include(out, "finalized")
  })

  it("a failure exits with 1 and is reported once; a success exits with 0", async () => {
    const failed = await run("fail")
    assert.strictEqual(failed.code, 1, failed.out)
    assert.strictEqual(failed.out.split("boom").length - 1, 1, failed.out)
    const ok = await run("ok")
    assert.strictEqual(ok.code, 0, ok.out)
    assert.include(ok.out, "done")
  })
})
