/**
 * Helpers for tests that start `npx tsx run` as a real process and kill it: start it in
 * its own process group, wait for a condition on the run folder, read JSONL rows.
 */
import { type ChildProcess, spawn } from "node:child_process"
import * as Fs from "node:fs"
import * as Path from "node:path"

const ROOT = Path.resolve(import.meta.dirname, "../..")

/**
 * Starts `node --import tsx run.ts ...args` in its own process group, collecting its output.
 * Node loads tsx as a loader in the same process: the `tsx` command would put a parent
 * process in front that, on SIGINT, SIGKILLs the program when its event loop does not
 * acknowledge the signal within about 60 ms (a busy training step), so the program's own
 * Ctrl-C handling could not be tested through it.
 */
export const start = (args: ReadonlyArray<string>) => startScript("run.ts", args)

/** As `start`, for another of gyre's entry points (`serve.ts`, `eval.ts`, ...). */
export const startScript = (script: string, args: ReadonlyArray<string>) => {
  // Its own process group, so a signal can reach the whole group as a terminal's Ctrl-C does.
  const child = spawn(process.execPath, ["--import", "tsx", script, ...args], { cwd: ROOT, stdio: ["ignore", "pipe", "pipe"], detached: true })
  let output = ""
  child.stdout!.on("data", (d) => (output += d))
  child.stderr!.on("data", (d) => (output += d))
  return { child, output: () => output }
}

/** The exit code of `child` once it has exited (null when a signal ended it). */
export const exited = (child: ChildProcess) =>
  new Promise<number | null>((resolve) => child.exitCode !== null || child.signalCode !== null ? resolve(child.exitCode) : child.on("exit", (code) => resolve(code)))

/** Polls every `everyMs` until `done()` or the child exits, for at most 90 s. */
export const waitUntil = async (done: () => boolean, child: ChildProcess, everyMs = 50) => {
  const deadline = Date.now() + 90_000
  while (!done() && child.exitCode === null && Date.now() < deadline) await new Promise((r) => setTimeout(r, everyMs))
}

/** Kills `child`'s whole process group (with any worker processes) with SIGKILL and waits for it. */
export const killGroup = async (child: ChildProcess) => {
  process.kill(-child.pid!, "SIGKILL")
  await exited(child)
}

/** The non-empty lines of a file (none when it does not exist). */
export const lines = (file: string) => (Fs.existsSync(file) ? Fs.readFileSync(file, "utf8").split("\n").filter((l) => l.trim() !== "") : [])

/** The rows of a JSONL file that parse (a torn last line does not). */
export const rows = (file: string): Array<Record<string, unknown>> =>
  lines(file).flatMap((l) => {
    try {
      return [JSON.parse(l) as Record<string, unknown>]
    } catch {
      return []
    }
  })
