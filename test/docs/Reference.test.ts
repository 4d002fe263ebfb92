/**
 * docs/reference is generated from the code (`npm run docs:reference`): every flag of every
 * command from the CLI's own definitions, and the options of Env.make, Episode.make,
 * Agent.env and Game.env from their interfaces' doc comments. A flag or an option added,
 * changed or removed without regenerating fails here, naming the page.
 */
import * as Fs from "node:fs"
import * as Path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { generate } from "../../scripts/reference-docs.ts"

const root = Path.resolve(import.meta.dirname, "../..")
const pages = generate()

describe("docs/reference", () => {
  it("is what the code generates now (else run npm run docs:reference)", () => {
    for (const [file, text] of pages) {
      assert.isTrue(Fs.existsSync(Path.join(root, file)), `${file} is missing: run npm run docs:reference`)
      assert.strictEqual(Fs.readFileSync(Path.join(root, file), "utf8"), text, `${file} is stale: run npm run docs:reference`)
    }
  })

  it("lists every command and the flags a user reaches for", () => {
    const cli = pages.get("docs/reference/cli.md")!
    for (const command of ["run", "eval", "serve", "report", "export", "rescore", "loops", "loops runs", "init"]) assert.include(cli, `## gyre ${command}\n`, command)
    for (const flag of ["--grad-clip <number>", "--weight-decay <number>", "--sample-concurrency <integer>", "--otlp <string>", "--log-level"]) assert.include(cli, `\`${flag}`, flag)
  })

  it("gives every option its type and its comment", () => {
    const options = pages.get("docs/reference/env-options.md")!
    for (const section of ["## Env.make", "## Episode.make", "## Agent.env", "## Game.env"]) assert.include(options, section)
    for (const option of ["`services`", "`heldOut`", "`step` (required)", "`run` (required)", "`toMove` (required)", "`maxMoves`"]) assert.include(options, `| ${option}`, option)
    assert.notInclude(options, "(no comment)", "an option without a doc comment: write one in its interface")
  })
})
