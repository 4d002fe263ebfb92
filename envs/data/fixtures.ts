/**
 * Where the envs' fixture files are: beside this file in the sources, and still there when
 * an env runs from the build (dist/envs/), which holds no data files.
 */
import * as Fs from "node:fs"
import { fileURLToPath } from "node:url"

/** The path of fixture `name` (e.g. "gsm8k.jsonl"). */
export const fixture = (name: string): string => {
  const beside = fileURLToPath(new URL(`./${name}`, import.meta.url))
  return Fs.existsSync(beside) ? beside : fileURLToPath(new URL(`../../../envs/data/${name}`, import.meta.url))
}
