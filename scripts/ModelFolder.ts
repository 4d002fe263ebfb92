/**
 * What the pretraining scripts share at their end: the machine line of a card, and
 * writing a model folder (config.json, weights.bin, card.json).
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { saveBaseModel } from "../src/backends/local/Checkpoint.ts"

/** The `machine` field of a card. */
export const machine = (): string => "2 cores (shared), Node " + process.version + ", tfjs 4.22 wasm backend"

/** Writes `out`: the model's config and weights, and its card. */
export const writeModelFolder = async (out: string, config: Parameters<typeof saveBaseModel>[1], weights: Parameters<typeof saveBaseModel>[2], card: unknown): Promise<void> => {
  fs.mkdirSync(out, { recursive: true })
  await saveBaseModel(out, config, weights)
  fs.writeFileSync(path.join(out, "card.json"), JSON.stringify(card, null, 2) + "\n")
}
