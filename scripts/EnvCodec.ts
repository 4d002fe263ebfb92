/**
 * How `scripts/pretrain.ts` turns an env's problems into training data for the embedded
 * char model, and grades its completions: sequence = BOS ++ prompt ++ reference ++ EOS,
 * trained on the reference and EOS only; a completion is correct when it ends with EOS
 * and its text, trimmed, equals the reference, trimmed.
 */
import { type Datum, int64, modelInputFromTokens } from "../src/contract/Contract.ts"
import * as Env from "../src/vocabulary/Env.ts"
import { BOS, decodeChars, EOS, encodeChars } from "../src/backends/local/CharTokenizer.ts"

export interface EnvCodec {
  readonly env: Env.AnyEnv
  readonly difficulty: number
  readonly maxTokens: number
  /** --probe: train-split problems kept out of pretraining, chosen by a hash of the problem */
  readonly isProbe: (p: unknown) => boolean
  readonly promptIds: (p: unknown) => Array<number>
  readonly toDatum: (p: unknown) => Datum
  readonly isCorrect: (p: unknown, tokens: ReadonlyArray<number>, stop: string) => boolean
}

const encode = (text: string): Array<number> => {
  const r = encodeChars(text)
  if (!("ids" in r)) throw new Error(`cannot encode ${JSON.stringify(text)} with the char-ascii tokenizer`)
  return r.ids
}

/**
 * The codec of `env`. `difficulty` overrides the env's (else 1); `probe` is the fraction
 * of problems kept out; `fail` reports a problem the char model cannot learn.
 */
export const codecOf = (
  env: Env.AnyEnv,
  reference: (p: unknown) => string,
  options: { readonly difficulty: number | undefined; readonly probe: number; readonly contextLength: number; readonly fail: (message: string) => never },
): EnvCodec => {
  const { probe, contextLength, fail } = options
  const promptIds = (p: unknown): Array<number> => {
    const prompt = env.prompt(p)
    if (typeof prompt !== "string") return fail(`env "${env.name}": its prompt is chat messages; the embedded char model pretrains on text prompts only`)
    return [BOS, ...encode(prompt)]
  }
  const toDatum = (p: unknown): Datum => {
    const prompt = promptIds(p)
    const tokens = [...prompt, ...encode(reference(p)), EOS]
    if (tokens.length > contextLength) {
      fail(`env "${env.name}": problem ${JSON.stringify(p)} is ${tokens.length} tokens with its reference; the model's context is ${contextLength}`)
    }
    return {
      modelInput: modelInputFromTokens(tokens),
      lossFnInputs: { target_tokens: int64(tokens.map((t, i) => (i < prompt.length ? -100 : t))) },
    }
  }
  return {
    env,
    difficulty: options.difficulty ?? env.difficulty ?? 1,
    maxTokens: env.sampling?.maxTokens ?? 16,
    isProbe: (p) => probe > 0 && (Env.hash32(`probe:${env.name}:${JSON.stringify(p)}`) % 10_000) / 10_000 < probe,
    promptIds,
    toDatum,
    isCorrect: (p, tokens, stop) => stop === "stop" && tokens[tokens.length - 1] === EOS && decodeChars(tokens).trim() === reference(p).trim(),
  }
}
