/**
 * Helpers for tests that start gyre's commands as real processes and kill them: start one
 * in its own process group, wait for a condition on the run folder, read JSONL rows. The
 * processes run the built JavaScript (`dist/`, built once by the e2e project's global
 * setup, `test/e2eSetup.ts`), as an installed gyre runs.
 */
import { type ChildProcess, spawn } from "node:child_process"
import * as Fs from "node:fs"
import * as Path from "node:path"

const ROOT = Path.resolve(import.meta.dirname, "../..")

/** The built `gyre` command. */
export const MAIN = Path.join(ROOT, "dist", "src", "cli", "main.js")

/**
 * Starts `node dist/src/cli/main.js run ...args` in its own process group, collecting its
 * output. Node runs it directly: a wrapper command (`npx`, `tsx`) would put a parent process
 * in front that may not pass a signal on as a terminal's Ctrl-C does.
 */
export const start = (args: ReadonlyArray<string>, env: Readonly<Record<string, string>> = {}) => startCommand("run", args, env)

/**
 * As `start`, for another of gyre's commands (`serve`, `eval`, ...; none for the bare
 * `gyre`). `env` adds settings to the child's environment (this process's stays as it is).
 */
export const startCommand = (command: string | undefined, args: ReadonlyArray<string>, env: Readonly<Record<string, string>> = {}) => {
  // Its own process group, so a signal can reach the whole group as a terminal's Ctrl-C does.
  const child = spawn(process.execPath, [MAIN, ...(command !== undefined ? [command] : []), ...args], { cwd: ROOT, stdio: ["ignore", "pipe", "pipe"], detached: true, env: { ...process.env, ...env } })
  let output = ""
  child.stdout!.on("data", (d) => (output += d))
  child.stderr!.on("data", (d) => (output += d))
  return { child, output: () => output }
}

/** The exit code of `child` once it has exited (null when a signal ended it). */
export const exited = (child: ChildProcess) =>
  new Promise<number | null>((resolve) => child.exitCode !== null || child.signalCode !== null ? resolve(child.exitCode) : child.on("exit", (code) => resolve(code)))

/**
 * Polls every `everyMs` until `done()` or the child exits. No deadline of its own: a loaded
 * machine may take minutes, and vitest's hang-only limit ends a wait that never returns.
 */
export const waitUntil = async (done: () => boolean, child: ChildProcess, everyMs = 50) => {
  while (!done() && child.exitCode === null) await new Promise((r) => setTimeout(r, everyMs))
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
