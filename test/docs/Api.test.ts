/**
 * docs/api is the reference `npm run docs:api` generates from the declarations and doc
 * comments as they are now: a page per namespace and entry point, each export with its
 * signature, parameters, what it returns (for an Effect: succeeds with, fails with,
 * requires), its comment with `{@link}`s resolved and its examples fenced. A comment or a
 * type changed without regenerating fails here, naming the page.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Fs from "node:fs"
import * as Path from "node:path"
import { generate } from "../../scripts/api-docs.ts"
import { declarationsOf, effectParts, functionShape, splitTop } from "../../scripts/Declarations.ts"

const dir = Path.resolve(import.meta.dirname, "../../docs/api")
// one generation (it emits the declarations with the compiler) for every check below
const pages = generate()

describe("docs/api", () => {
  it("is what the declarations and doc comments generate now (else run npm run docs:api)", () => {
    assert.deepStrictEqual(Fs.readdirSync(dir).sort(), [...pages.keys()].sort())
    for (const [name, text] of pages) assert.strictEqual(Fs.readFileSync(Path.join(dir, name), "utf8"), text, `docs/api/${name} is stale: run npm run docs:api`)
  })

  it("documents the namespaces and their exports", () => {
    for (const ns of ["Env", "Episode", "Tool", "Reward", "Agent", "Game", "CustomLoss", "Datum"]) assert.isTrue(pages.has(`${ns}.md`), ns)
    assert.include(pages.get("Agent.md")!, "### env")
    assert.include(pages.get("CustomLoss.md")!, "### gspo")
    assert.include(pages.get("gyre-rewards.md")!, "### rankJudge")
    assert.include(pages.get("gyre-runner.md")!, "### train", "an export re-exported by a second list from the same file")
  })

  it("shows signatures, parameters, returns and failures, and fenced examples", () => {
    const env = pages.get("Env.md")!
    assert.match(env, /### make\n\n`const`\n\n```ts\nconst make: <P/)
    assert.include(pages.get("Episode.md")!, "| `episode` | `Episode<P, S, R>` |")
    assert.match(env, /- fails with `EnvError`/)
    assert.include(pages.get("Episode.md")!, "**Example**\n\n```ts\n// a scratch database per episode")
  })

  it("resolves every {@link} to a page's entry or to code", () => {
    for (const [name, text] of pages) assert.notInclude(text, "{@link", name)
    assert.match(pages.get("README.md")!, /\[`render`\]\(DatumIssue\.md#render\)/)
  })
})

describe("reading declarations", () => {
  const dts = [
    "export declare const f: <A>(a: A, b?: { x: 1; y: 2 }) => Effect.Effect<A, import(\"./E.ts\").E, never>;",
    "export interface I<T extends { k: 1 }> {",
    "    readonly a: T;",
    "}",
    "export declare function g(s: string): number;",
    "export declare function g(s: number): string;",
  ].join("\n")

  it("finds each declaration whole, overloads included, types without their file", () => {
    assert.deepStrictEqual(declarationsOf(dts, "f"), ["const f: <A>(a: A, b?: { x: 1; y: 2 }) => Effect.Effect<A, E, never>;"])
    assert.deepStrictEqual(declarationsOf(dts, "I"), ["interface I<T extends { k: 1 }> {\n    readonly a: T;\n}"])
    assert.strictEqual(declarationsOf(dts, "g").length, 2)
  })

  it("splits a signature into parameters and an Effect's parts", () => {
    const shape = functionShape(declarationsOf(dts, "f")[0]!)!
    assert.deepStrictEqual(shape.parameters, [{ name: "a", type: "A" }, { name: "b?", type: "{ x: 1; y: 2 }" }])
    assert.deepStrictEqual(effectParts(shape.returns), { success: "A", failure: "E", requires: "never" })
    assert.deepStrictEqual(splitTop("a: Map<K, V>, b: (x: 1, y: 2) => void"), ["a: Map<K, V>", "b: (x: 1, y: 2) => void"])
    assert.isUndefined(effectParts("Effect.Effect<A> | B"))
  })
})
