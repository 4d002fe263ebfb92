/**
 * gyre as a dependency: packs this repo, installs the tarball into a fresh project from
 * npm's cache (filled by this repo's own install), and in that project typechecks an env,
 * a reward and a property test, runs the property test, and runs a 3-step `npx gyre run`
 * under plain node.
 */
import { execFileSync, spawnSync } from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { assert, describe, it } from "@effect/vitest"

const ROOT = Path.resolve(import.meta.dirname, "../..")
const lock = JSON.parse(Fs.readFileSync(Path.join(ROOT, "package-lock.json"), "utf8")) as { packages: Record<string, { version?: string }> }
/** The versions this repo installed, so the project's install finds them in the cache. */
const pinned = (name: string) => `${name}@${lock.packages[`node_modules/${name}`]!.version}`

const files: Record<string, string> = {
  "rewards/reversed.ts": `import { Reward } from "gyre"

export interface Word { readonly word: string }

/** 1 when the completion is the word reversed (surrounding spaces ignored), else 0. */
export const reversed = Reward.make<Word>("reversed", (r) => (r.completion.trim() === [...r.problem.word].reverse().join("") ? 1 : 0))
`,
  "envs/word.ts": `import { Schema } from "effect"
import { Env, Reward } from "gyre"
import { maxLength } from "gyre/rewards"
import { reversed } from "../rewards/reversed.ts"

const WORDS = ["cat", "dog", "sun", "map", "pen", "cup", "hat", "box", "key", "bus"] as const

export default Env.make({
  name: "word",
  problem: Schema.Struct({ word: Schema.String }),
  source: Env.seeded(({ random }) => ({ word: random.pick(WORDS) })),
  prompt: (p) => \`Reverse \${p.word}:\`,
  reference: (p) => \` \${[...p.word].reverse().join("")}\`,
  reward: Reward.weighted({ reversed: [reversed, 1], brief: [maxLength(8), 0] }),
  sampling: { maxTokens: 6 },
  eval: { heldOut: 0.2, size: 4 },
})
`,
  "test/reversed.test.ts": `import { test } from "node:test"
import { Effect } from "effect"
import * as fc from "fast-check"
import { laws, score } from "gyre/testing"
import { reversed } from "../rewards/reversed.ts"

const problems = fc.record({ word: fc.string({ unit: fc.constantFrom(..."abcdefghijklmnopqrstuvwxyz"), minLength: 1, maxLength: 8 }) })

test("reversed is bounded in [0, 1]", () => laws.wellBehaved(reversed, { min: 0, max: 1, problems }))
test("reversed scores the reversed word 1", () =>
  fc.assert(fc.asyncProperty(problems, async (p) => {
    const s = await Effect.runPromise(score(reversed, p, \` \${[...p.word].reverse().join("")} \`))
    if (s.value !== 1) throw new Error(\`got \${s.value} for \${JSON.stringify(p)}\`)
  })))
`,
  "tsconfig.json": JSON.stringify({
    compilerOptions: { target: "ES2022", module: "NodeNext", moduleResolution: "NodeNext", strict: true, noEmit: true, allowImportingTsExtensions: true, types: ["node"] },
    include: ["envs", "rewards", "test"],
  }),
  // a folder of CommonJS modules: a .js env with require, and a .ts env
  "cjs/package.json": JSON.stringify({ type: "commonjs" }),
  "cjs/echo.js": `const { Schema } = require("effect")
const { Env, Reward } = require("gyre")

module.exports = Env.make({
  name: "echo-cjs",
  problem: Schema.Struct({ n: Schema.Int }),
  source: Env.seeded(({ random }) => ({ n: random.int(0, 9) })),
  prompt: (p) => "Say " + p.n + ":",
  reward: Reward.make("said", (r) => (r.completion.includes(String(r.problem.n)) ? 1 : 0)),
  sampling: { maxTokens: 3 },
})
`,
  "cjs/echo-ts.ts": `import { Schema } from "effect"
import { Env, Reward } from "gyre"

export default Env.make({
  name: "echo-cts",
  problem: Schema.Struct({ n: Schema.Int }),
  source: Env.seeded(({ random }) => ({ n: random.int(0, 9) })),
  prompt: (p) => \`Say \${p.n}:\`,
  reward: Reward.make<{ readonly n: number }>("said", (r) => (r.completion.includes(String(r.problem.n)) ? 1 : 0)),
  sampling: { maxTokens: 3 },
})
`,
  // the reward test as docs/testing-rewards.md writes one, run by vitest as docs/install.md installs it
  "test/reversed.spec.ts": `import { Effect } from "effect"
import fc from "fast-check"
import { describe, it } from "vitest"
import { laws, probes } from "gyre/testing"
import { reversed } from "../rewards/reversed.ts"

const problems = fc.record({ word: fc.string({ unit: fc.constantFrom(..."abcdefghijklmnopqrstuvwxyz"), minLength: 1, maxLength: 8 }) })

describe("reversed", () => {
  it("is bounded and deterministic", () => laws.wellBehaved(reversed, { min: 0, max: 1, problems }))
  it("resists known exploits", () =>
    Effect.runPromise(probes.assertNoExploits(reversed, { problems: [{ word: "cat" }], gold: (p) => [...p.word].reverse().join("") })))
})
`,
  // no overrides: gyre's dependencies support the Node it names by themselves
  "package.json": JSON.stringify({ name: "user-project", version: "1.0.0", private: true, type: "module" }),
}

interface Dependency {
  readonly version?: string
  readonly dependencies?: Record<string, Dependency>
}
/** Every version of `name` in an `npm ls --json` tree. */
const versionsOf = (node: Dependency, name: string): Array<string> =>
  Object.entries(node.dependencies ?? {}).flatMap(([n, d]) => [...(n === name && d.version !== undefined ? [d.version] : []), ...versionsOf(d, name)])

/** The newest effect 4.x on the registry (what a user's `"effect": "^4.x"` gets today). */
const newestEffect4 = (): string => {
  const versions = JSON.parse(execFileSync("npm", ["view", "effect@^4", "version", "--json"], { cwd: ROOT, encoding: "utf8" })) as string | Array<string>
  return typeof versions === "string" ? versions : versions[versions.length - 1]!
}

const sh = (cmd: string, args: ReadonlyArray<string>, cwd: string) => {
  const r = spawnSync(cmd, args, { cwd, encoding: "utf8", env: { ...process.env, npm_config_update_notifier: "false", npm_config_fund: "false", npm_config_audit: "false" } })
  return { code: r.status, out: `${r.stdout ?? ""}${r.stderr ?? ""}` }
}

describe("a user project that depends on gyre", () => {
  it("installs the packed tarball, typechecks, runs its property test and a 3-step gyre run", () => {
    const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-user-"))
    try {
      // dist/ is built once by the e2e setup (test/e2eSetup.ts): packing without `prepare` keeps other
      // files' processes, which run dist/, from loading it while a second build rewrites it
      const packed = JSON.parse(execFileSync("npm", ["pack", "--json", "--ignore-scripts", "--pack-destination", dir], { cwd: ROOT, encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] })) as Array<{ filename: string; files: Array<{ path: string }> }>
      const paths = packed[0]!.files.map((f) => f.path)
      assert.isTrue(paths.includes("dist/src/cli/main.js"), "the tarball holds the compiled command")
      assert.isTrue(paths.includes("dist/src/index.d.ts"), "the tarball holds type declarations")
      assert.isTrue(paths.includes("models/base/weights.bin"), "the tarball holds the base model")
      assert.deepStrictEqual(paths.filter((p) => /^(test|runs|tmp|src)\//.test(p) || p.endsWith(".test.js")), [], "no tests, runs or sources in the tarball")

      for (const [file, text] of Object.entries(files)) {
        Fs.mkdirSync(Path.dirname(Path.join(dir, file)), { recursive: true })
        Fs.writeFileSync(Path.join(dir, file), text)
      }
      // from npm's cache where it has the packages; the registry only for what it lacks (the cache keeps one form of a
      // package's metadata, and an install elsewhere may have replaced the full form this install asks for)
      // effect: the newest 4.x the registry has, not the one gyre develops with (gyre takes the user's copy as a peer)
      const effect = newestEffect4()
      const agentPeers = ["ai", "@ai-sdk/openai-compatible", "zod"].map(pinned)
      const install = sh("npm", ["install", "--prefer-offline", Path.join(dir, packed[0]!.filename), `effect@${effect}`, pinned("fast-check"), pinned("typescript"), pinned("@types/node"), ...agentPeers], dir)
      assert.strictEqual(install.code, 0, install.out)
      assert.notMatch(install.out, /ERESOLVE|peer dep|deprecated/i, "no peer conflict or deprecation to wonder about")
      const effects = versionsOf(JSON.parse(execFileSync("npm", ["ls", "effect", "--all", "--json"], { cwd: dir, encoding: "utf8" })) as Dependency, "effect")
      assert.deepStrictEqual([...new Set(effects)], [effect], "one copy of effect: the user's")
      // every dependency supports the Node gyre names (package.json "engines"), with no override in the user's project
      assert.notMatch(install.out, /EBADENGINE/, install.out)
      const tree = JSON.parse(execFileSync("npm", ["ls", "undici", "--all", "--json"], { cwd: dir, encoding: "utf8" })) as Dependency
      const undici = versionsOf(tree, "undici")
      assert.isAbove(undici.length, 0, "gyre's HTTP client is on undici")
      assert.deepStrictEqual(undici.filter((v) => Number(v.split(".")[0]) >= 8), [], "undici 8 and later need Node 22.19")

      // docs/install.md's line for the test helpers, as written
      const helpers = /^npm install --save-dev vitest@.*$/m.exec(Fs.readFileSync(Path.join(ROOT, "docs/install.md"), "utf8"))![0].split(" ")
      const dev = sh("npm", [...helpers.slice(1), "--prefer-offline"], dir)
      assert.strictEqual(dev.code, 0, dev.out)
      assert.notMatch(dev.out, /ERESOLVE|EBADENGINE/, dev.out)
      // the user's code typechecks with the user's settings, with no error from inside gyre
      const tsc = sh(Path.join(dir, "node_modules/.bin/tsc"), ["--noEmit", "-p", "."], dir)
      assert.strictEqual(tsc.code, 0, tsc.out)

      const vitest = sh("npx", ["vitest", "run", "test/reversed.spec.ts"], dir)
      assert.strictEqual(vitest.code, 0, vitest.out)
      assert.match(vitest.out, /2 passed/)

      const props = sh("node", ["--import", "tsx", "--test", "--test-reporter=tap", "test/reversed.test.ts"], dir)
      assert.strictEqual(props.code, 0, props.out)
      assert.match(props.out, /# pass 2/)

      const run = sh("npx", ["gyre", "run", "./envs/word.ts", "--steps", "3", "--groups", "2", "--group-size", "2", "--eval-every", "3", "--name", "try"], dir)
      assert.strictEqual(run.code, 0, run.out)
      assert.match(run.out, /step 3\/3/)
      assert.match(run.out, /done: runs\/try/)
      const metrics = Fs.readFileSync(Path.join(dir, "runs/try/metrics.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l) as Record<string, number>)
      assert.deepStrictEqual(metrics.map((m) => m["step"]), [0, 1, 2, 3])
      assert.isTrue(Fs.existsSync(Path.join(dir, "runs/try/state/step-3.ckpt")))

      // a shipped agent env runs from the package once its optional peers are installed
      const agent = sh("npx", ["gyre", "run", "calculator-agent", "--steps", "1", "--groups", "1", "--group-size", "2", "--eval-every", "0", "--name", "agent"], dir)
      assert.strictEqual(agent.code, 0, agent.out)
      assert.match(agent.out, /step 1\/1/)

      // gyre init scaffolds an env and its reward's test that pass and run in the user's project
      const init = sh("npx", ["gyre", "init", "sums"], dir)
      assert.strictEqual(init.code, 0, init.out)
      assert.include(init.out, "npx gyre run ./envs/sums.ts")
      const scaffoldTest = sh("npx", ["vitest", "run", "test/sums.test.ts"], dir)
      assert.strictEqual(scaffoldTest.code, 0, scaffoldTest.out)
      const scaffoldRun = sh("npx", ["gyre", "run", "./envs/sums.ts", "--steps", "1", "--groups", "1", "--group-size", "2", "--eval-every", "0", "--name", "sums"], dir)
      assert.strictEqual(scaffoldRun.code, 0, scaffoldRun.out)
      assert.match(scaffoldRun.out, /step 1\/1/)

      // env files in a CommonJS folder load with the same gyre and effect, .js and .ts alike
      for (const env of ["./cjs/echo.js", "./cjs/echo-ts.ts"]) {
        const cjs = sh("npx", ["gyre", "run", env, "--steps", "1", "--groups", "1", "--group-size", "2", "--eval-every", "0", "--name", Path.basename(env).replace(/\W/g, "-")], dir)
        assert.strictEqual(cjs.code, 0, `${env}: ${cjs.out}`)
        assert.match(cjs.out, /step 1\/1/, env)
      }

      // a wrong path is one line naming the file, no stack
      const bad = sh("npx", ["gyre", "run", "./envs/missing.ts"], dir)
      assert.strictEqual(bad.code, 1)
      assert.strictEqual(bad.out.trim(), `error: no such file: ${Path.join(Fs.realpathSync(dir), "envs/missing.ts")}`)
    } finally {
      Fs.rmSync(dir, { recursive: true, force: true })
    }
  })
})
