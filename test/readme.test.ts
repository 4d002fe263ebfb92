/**
 * The TypeScript examples of the README and of `docs/` compile as written, against gyre's
 * entry points, and run: every block is imported as a module; an env block's default
 * export trains for one step through the runner, held-out evaluation as the env sets it
 * (an env that starts a server process runs in test/docs/Commands.test.ts instead); a
 * block's `reward` export is a reward; and every reward test example runs as a test suite,
 * once for each of 20 fast-check seeds. A block marked `<!-- not run: why -->` is skipped
 * and counted; one marked `<!-- file: path -->` is a file of the user's project, written
 * at its path and typechecked. Every relative link between the pages names a file that
 * exists, and an anchor that one of its headings makes.
 */
import { execFileSync } from "node:child_process"
import * as Fs from "node:fs"
import * as Path from "node:path"
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fc from "fast-check"
import { train } from "../src/app/Training.ts"
import * as Env from "../src/vocabulary/Env.ts"
import * as Reward from "../src/vocabulary/Reward.ts"
import { allBlocks, PAGES } from "./docs/Blocks.ts"

const root = Path.resolve(import.meta.dirname, "..")

const tsBlocks = allBlocks().filter((b) => b.lang === "ts")
const blocks = tsBlocks.filter((b) => b.notRun === undefined)
// inside the repo (tmp/ is git-ignored), so "gyre" resolves through the same paths as envs/
const dir = Path.join(root, "tmp", `readme-${process.pid}`)
const SEEDS = Array.from({ length: 20 }, (_, i) => i + 1)
const isSuite = (code: string) => /from "(@effect\/)?vitest"/.test(code)
// a project file `envs/mcp/x.ts` sits beside the env blocks as `mcp/x.ts`, where an env block's relative path finds it
const blockFile = (i: number, seed?: number) =>
  blocks[i]!.file !== undefined
    ? Path.join(dir, "blocks", blocks[i]!.file!.split("/").slice(1).join("/"))
    : Path.join(dir, "blocks", seed === undefined ? `block${i}.ts` : `block${i}-seed${seed}.ts`)
/** An env that starts a server process: run as a process by the e2e docs test, not here. */
const startsProcess = (code: string) => /Server\.stdio\(/.test(code)

Fs.rmSync(dir, { recursive: true, force: true })
Fs.mkdirSync(Path.join(dir, "blocks"), { recursive: true })
blocks.forEach((b, i) => {
  Fs.mkdirSync(Path.dirname(blockFile(i)), { recursive: true })
  Fs.writeFileSync(blockFile(i), b.code)
  // a suite registers its tests when imported: one copy per seed
  if (isSuite(b.code)) for (const seed of SEEDS) Fs.writeFileSync(blockFile(i, seed), b.code)
})
const rel = (p: string) => Path.relative(dir, Path.join(root, p))
Fs.writeFileSync(Path.join(dir, "tsconfig.json"), JSON.stringify({
  extends: rel("tsconfig.json"),
  compilerOptions: {
    noUnusedLocals: false,
    paths: {
      gyre: [rel("src/index.ts")],
      "gyre/testing": [rel("src/testing/index.ts")],
      "gyre/rewards": [rel("rewards/index.ts")],
      "gyre/runner": [rel("src/entry/runner.ts")],
      "gyre/embedded": [rel("src/entry/embedded.ts")],
      "gyre/http": [rel("src/entry/http.ts")],
      "gyre/mcp": [rel("src/mcp/index.ts")],
    },
  },
  include: ["blocks"],
}))
afterAll(() => Fs.rmSync(dir, { recursive: true, force: true }))

/** GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens. */
const slug = (heading: string) => heading.trim().toLowerCase().replace(/[^\w\- ]/g, "").replaceAll(" ", "-")

describe("README and docs", () => {
  const skipped = tsBlocks.filter((b) => b.notRun !== undefined)
  it(`${blocks.length} TypeScript blocks run, ${skipped.length} skipped, each skip with its reason`, () => {
    for (const b of skipped) assert.isAbove(b.notRun!.length, 3, `${b.page}:${b.line}: <!-- not run: --> without a reason`)
    // the count a reader of the test output sees: blocks checked and skipped
    assert.isAtLeast(blocks.length, 8, `${blocks.length} TypeScript blocks run, ${skipped.length} skipped`)
  })

  it("every relative link names a file that exists and an anchor one of its headings makes", () => {
    const broken: Array<string> = []
    for (const page of PAGES) {
      const text = Fs.readFileSync(Path.join(root, page), "utf8").replace(/^( *)```[\s\S]*?^\1```/gm, "")
      for (const [, target] of text.matchAll(/\]\(([^)\s]+)\)/g)) {
        if (/^(https?:|mailto:)/.test(target!)) continue
        const [file, anchor] = target!.split("#")
        const resolved = file === "" ? Path.join(root, page) : Path.resolve(Path.dirname(Path.join(root, page)), file!)
        if (!Fs.existsSync(resolved)) {
          broken.push(`${page}: ${target} (no such file)`)
          continue
        }
        if (anchor === undefined || !resolved.endsWith(".md")) continue
        const headings = [...Fs.readFileSync(resolved, "utf8").matchAll(/^#+ (.+)$/gm)].map((m) => slug(m[1]!))
        if (!headings.includes(anchor)) broken.push(`${page}: ${target} (no heading makes #${anchor})`)
      }
    }
    assert.deepStrictEqual(broken, [])
  })

  it("every ```ts block typechecks", () => {
    assert.isAtLeast(blocks.length, 8)
    let output = ""
    try {
      execFileSync(process.execPath, [Path.join(root, "node_modules/typescript/bin/tsc"), "--noEmit", "-p", dir], { encoding: "utf8" })
    } catch (e) {
      output = String((e as { stdout?: string }).stdout ?? e)
    }
    assert.strictEqual(output, "", `README and docs examples do not compile:\n${output}`)
  })

  describe("every ```ts block runs", () => {
    blocks.forEach((b, i) => {
      if (isSuite(b.code) || b.file !== undefined) return
      it.live(`the block at ${b.page}:${b.line}`, () =>
        Effect.gen(function* () {
          const module = (yield* Effect.promise(() => import(blockFile(i)))) as Record<string, unknown>
          const env = module["default"]
          if (env !== undefined) {
            const def = env as Env.AnyEnv
            assert.isString(def.name)
            const task = yield* Env.taskAt(def, { seed: 1, index: 0, split: "train" })
            const prompt = def.prompt(task.problem)
            assert.isTrue(prompt.length > 0, `${def.name}: an empty prompt`)
            // one step through the runner, held out as the env sets it: what `gyre run` does first
            if (!startsProcess(b.code)) {
              const out = Path.join(dir, "runs")
              const run = yield* train({ env: def, steps: 1, groups: 2, groupSize: 2, evalSize: 4, saveEvery: 0, hackWatchEvery: 0, out })
              assert.strictEqual(run.metrics.length, 1, `${def.name}: one step`)
            }
          }
          if (module["reward"] !== undefined) assert.isTrue(Reward.isReward(module["reward"]))
        }))
    })
  })

  // the reward test example, as a user runs it, with 20 seeds: every law and probe holds on each
  blocks.forEach((b, i) => {
    if (!isSuite(b.code)) return
    for (const seed of SEEDS) {
      describe(`the test block at ${b.page}:${b.line}, fast-check seed ${seed}`, async () => {
        beforeAll(() => {
          fc.configureGlobal({ ...fc.readConfigureGlobal(), seed })
        })
        afterAll(() => {
          fc.resetConfigureGlobal()
        })
        await import(blockFile(i, seed))
      })
    }
  })
})
