/**
 * The TypeScript examples of the README and of `docs/` compile as written, against gyre's
 * entry points, and run: every block is imported as a module (an env block's default
 * export is an env whose first problems draw and render; a block's `reward` export is a
 * reward), and every reward test example runs as a test suite, once for each of 20
 * fast-check seeds. Every relative link between them names a file that exists, and an
 * anchor that one of its headings makes.
 */
import { execFileSync } from "node:child_process"
import * as Fs from "node:fs"
import * as Path from "node:path"
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fc from "fast-check"
import * as Env from "../src/vocabulary/Env.ts"
import * as Reward from "../src/vocabulary/Reward.ts"

const root = Path.resolve(import.meta.dirname, "..")

/** The pages whose examples are checked: the README and every page of docs/ (not the generated API reference). */
const PAGES = ["README.md", ...Fs.readdirSync(Path.join(root, "docs")).filter((f) => f.endsWith(".md")).sort().map((f) => `docs/${f}`)]

/** The ```ts blocks of every page, unindented, with the page and the line each starts on. */
const readmeBlocks = (): Array<{ readonly line: number; readonly code: string }> =>
  PAGES.flatMap((page) => {
    const text = Fs.readFileSync(Path.join(root, page), "utf8")
    return [...text.matchAll(/^( *)```ts\n([\s\S]*?)^\1```/gm)].map((m) => ({
      line: text.slice(0, m.index).split("\n").length,
      page,
      code: m[2]!.split("\n").map((l) => (l.startsWith(m[1]!) ? l.slice(m[1]!.length) : l)).join("\n"),
    }))
  })

const blocks = readmeBlocks()
// inside the repo (tmp/ is git-ignored), so "gyre" resolves through the same paths as envs/
const dir = Path.join(root, "tmp", `readme-${process.pid}`)
const SEEDS = Array.from({ length: 20 }, (_, i) => i + 1)
const isSuite = (code: string) => /from "(@effect\/)?vitest"/.test(code)
const blockFile = (i: number, seed?: number) => Path.join(dir, "blocks", seed === undefined ? `block${i}.ts` : `block${i}-seed${seed}.ts`)

Fs.rmSync(dir, { recursive: true, force: true })
Fs.mkdirSync(Path.join(dir, "blocks"), { recursive: true })
blocks.forEach((b, i) => {
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
      if (isSuite(b.code)) return
      it.effect(`the block at ${(b as { page?: string }).page ?? "README.md"}:${b.line}`, () =>
        Effect.gen(function* () {
          const module = (yield* Effect.promise(() => import(blockFile(i)))) as Record<string, unknown>
          const env = module["default"]
          if (env !== undefined) {
            // an env: its first problems draw and their prompts render
            const def = env as Env.AnyEnv
            assert.isString(def.name)
            for (let index = 0; index < 3; index++) {
              const task = yield* Env.taskAt(def, { seed: 1, index, split: "train" })
              const prompt = def.prompt(task.problem)
              assert.isTrue(typeof prompt === "string" ? prompt.length > 0 : prompt.length > 0, `${def.name}: an empty prompt`)
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
      describe(`the test block at ${(b as { page?: string }).page ?? "README.md"}:${b.line}, fast-check seed ${seed}`, async () => {
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
