/**
 * docs/api is the reference `npm run docs:api` generates from the doc comments as they
 * are now: a page per namespace and entry point, each export with its comment. A comment
 * changed without regenerating fails here, naming the page.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Fs from "node:fs"
import * as Path from "node:path"
import { generate } from "../../scripts/api-docs.ts"

const dir = Path.resolve(import.meta.dirname, "../../docs/api")

describe("docs/api", () => {
  it("is what the doc comments generate now (else run npm run docs:api)", () => {
    const pages = generate()
    assert.deepStrictEqual(Fs.readdirSync(dir).sort(), [...pages.keys()].sort())
    for (const [name, text] of pages) assert.strictEqual(Fs.readFileSync(Path.join(dir, name), "utf8"), text, `docs/api/${name} is stale: run npm run docs:api`)
  })

  it("documents the namespaces and their exports", () => {
    const pages = generate()
    for (const ns of ["Env", "Episode", "Tool", "Reward", "Agent", "Game", "CustomLoss", "Datum"]) assert.isTrue(pages.has(`${ns}.md`), ns)
    assert.include(pages.get("Agent.md")!, "### env")
    assert.include(pages.get("CustomLoss.md")!, "### gspo")
    assert.include(pages.get("gyre-rewards.md")!, "### rankJudge")
  })
})
