/**
 * The shell commands of the README and of `docs/`, run as a reader runs them, in order, in
 * a fresh project folder: every line of every ```bash block that is not marked
 * `<!-- not run: why -->` is a gyre command (`npx tsx run ...`, `npx gyre <command> ...`)
 * and exits 0 without an `error:` line. Runs are shortened to 2 steps of 2 groups x 2 (4
 * held-out problems, `eval --size 4`); `runs/<name>` in a later line is the folder of the
 * block's last run. The env blocks that start a server process (an MCP server) run here too,
 * 1 step each, from the files their page names. Skipped blocks are counted, and each must
 * say why.
 */
import { spawn } from "node:child_process"
import * as Fs from "node:fs"
import * as Path from "node:path"
import { afterAll, assert, describe, it } from "@effect/vitest"
import { allBlocks, type Block, commandsOf, root } from "./Blocks.ts"

const work = Path.join(root, "tmp", `docs-commands-${process.pid}`)
Fs.rmSync(work, { recursive: true, force: true })
Fs.mkdirSync(Path.join(work, "envs"), { recursive: true })
// "gyre" in the project's files resolves to this checkout's source, as in envs/ (tsx reads the tsconfig of the working folder)
Fs.writeFileSync(Path.join(work, "tsconfig.json"), JSON.stringify({ extends: Path.relative(work, Path.join(root, "tsconfig.json")) }))
afterAll(() => Fs.rmSync(work, { recursive: true, force: true }))

const SHORT_RUN = ["--groups", "2", "--group-size", "2", "--eval-size", "4", "--save-every", "0", "--hack-watch-every", "0"]

/** A shell line's words (quotes kept together, then dropped). */
const words = (line: string) => [...line.matchAll(/"[^"]*"|'[^']*'|\S+/g)].map((m) => m[0].replace(/^["']|["']$/g, ""))

const setFlag = (args: Array<string>, flag: string, value: string) => {
  const at = args.indexOf(flag)
  if (at >= 0) args[at + 1] = value
  else args.push(flag, value)
}

interface State {
  lastRun: string | undefined
}

/** Runs so far, for their folder names (every block writes into the one project folder). */
let runs = 0

/** The gyre command and its arguments for a doc's line, shortened; undefined for a line that is not one. */
const translate = (line: string, state: State): Array<string> | undefined => {
  const w = words(line)
  const at = w[0] === "npx" && (w[1] === "tsx" || w[1] === "gyre") ? 2 : -1
  if (at < 0 || w[at] === undefined) return undefined
  const [command, ...rest] = w.slice(at)
  const args = rest.map((a) => (a.includes("runs/<name>") && state.lastRun !== undefined ? a.replace("runs/<name>", state.lastRun) : a))
  if (command === "run") {
    setFlag(args, "--steps", "2")
    args.push(...SHORT_RUN)
    if (!args.includes("--name")) args.push("--name", `doc-${++runs}`)
    state.lastRun = Path.join("runs", args[args.indexOf("--name") + 1]!)
  }
  if (command === "eval" && !args.includes("--size")) args.push("--size", "4")
  return [command!, ...args]
}

/** Runs `gyre <args>` from the source, in the project folder; its exit code and output. */
const gyre = (args: ReadonlyArray<string>) =>
  new Promise<{ readonly code: number | null; readonly output: string }>((resolve) => {
    const child = spawn(process.execPath, ["--import", "tsx", Path.join(root, "src/cli/main.ts"), ...args], { cwd: work, stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, NO_COLOR: "1" } })
    let output = ""
    child.stdout.on("data", (d) => (output += d))
    child.stderr.on("data", (d) => (output += d))
    child.on("exit", (code) => resolve({ code, output }))
  })

const expectOk = async (args: ReadonlyArray<string>, where: string) => {
  const { code, output } = await gyre(args)
  assert.strictEqual(code, 0, `${where}: gyre ${args.join(" ")} exited ${code}:\n${output.slice(-2000)}`)
  assert.notMatch(output, /^error:/m, `${where}: gyre ${args.join(" ")} printed an error:\n${output.slice(-2000)}`)
}

const blocks = allBlocks()
const shell = blocks.filter((b) => b.lang === "bash" || b.lang === "sh")
/** Env blocks that start a server process: run here, not in-process (test/readme.test.ts). */
const serverEnvs = blocks.filter((b) => b.lang === "ts" && b.notRun === undefined && /Server\.stdio\(/.test(b.code) && /^export default /m.test(b.code))
/** The project path of a block: its `file:` marker, else its first line's `// envs/x.ts` comment. */
const projectPath = (b: Block) => b.file ?? /^\/\/ (\S+\.ts)/.exec(b.code)?.[1]

describe("the shell commands of the README and docs", () => {
  const skipped = shell.filter((b) => b.notRun !== undefined)
  it(`${shell.length - skipped.length} shell blocks run, ${skipped.length} skipped, each skip with its reason`, () => {
    for (const b of skipped) assert.isAbove(b.notRun!.length, 3, `${b.page}:${b.line}: <!-- not run: --> without a reason`)
    assert.isAtLeast(shell.length - skipped.length, 2, `${shell.length - skipped.length} shell blocks run, ${skipped.length} skipped`)
  })

  for (const b of shell.filter((b) => b.notRun === undefined)) {
    it(`the block at ${b.page}:${b.line}`, async () => {
      const state: State = { lastRun: undefined }
      for (const line of commandsOf(b)) {
        const args = translate(line, state)
        assert.isDefined(args, `${b.page}:${b.line}: "${line}" is not a gyre command this test can run: mark the block <!-- not run: why -->`)
        await expectOk(args!, `${b.page}:${b.line}`)
      }
    })
  }

  for (const b of serverEnvs) {
    it(`the env block at ${b.page}:${b.line}, which starts a server process, trains a step`, async () => {
      // the block and the project files it names, written where the page says
      for (const f of blocks.filter((x) => x.page === b.page && (x === b || x.file !== undefined))) {
        const path = projectPath(f)
        assert.isDefined(path, `${f.page}:${f.line}: name the file (// envs/x.ts on the first line, or <!-- file: path -->)`)
        Fs.mkdirSync(Path.dirname(Path.join(work, path!)), { recursive: true })
        Fs.writeFileSync(Path.join(work, path!), f.code)
      }
      await expectOk(["run", `./${projectPath(b)}`, "--steps", "1", ...SHORT_RUN, "--name", `server-env-${b.line}`], `${b.page}:${b.line}`)
    })
  }
})
