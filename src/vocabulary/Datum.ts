/**
 * Rollout -> Datum, and Datum validation.
 *
 * The Loops convention: `modelInput` = prompt ++ completion (length L); `logprobs` =
 * [0]*P ++ sampler logprobs; `advantages` = [0]*P ++ [A]*T; both float32 of shape [L].
 * Prompt positions have advantage 0, so they are inactive.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import { BackendError, type Datum, float32, int64, type LossFn, modelInputFromTokens, modelInputTokens, type TensorData } from "../contract/Contract.ts"
import { type DatumIssue, FLOAT32_MAX, render } from "../contract/DatumIssue.ts"
import { LOSS_INPUTS } from "../loss/Loss.ts"

export { activeCount } from "../loss/Loss.ts"

/** Builds the RL Datum of one sampled completion. @since 0.1.0 @category constructors */
export const rl = (options: {
  readonly prompt: ReadonlyArray<number>
  readonly completion: ReadonlyArray<number>
  readonly samplerLogprobs: ReadonlyArray<number>
  readonly advantage: number
}): Datum => {
  const { prompt, completion, samplerLogprobs, advantage } = options
  const P = prompt.length
  return {
    modelInput: modelInputFromTokens([...prompt, ...completion]),
    lossFnInputs: {
      logprobs: float32([...new Array<number>(P).fill(0), ...samplerLogprobs]),
      advantages: float32([...new Array<number>(P).fill(0), ...completion.map(() => advantage)]),
    },
  }
}

/** Builds an SFT Datum: the completion is the target, prompt positions are ignored (-100). @since 0.1.0 @category constructors */
export const sft = (options: { readonly prompt: ReadonlyArray<number>; readonly completion: ReadonlyArray<number> }): Datum => {
  const { prompt, completion } = options
  const tokens = [...prompt, ...completion]
  return {
    modelInput: modelInputFromTokens(tokens),
    lossFnInputs: {
      target_tokens: int64(tokens.map((t, i) => (i < prompt.length ? -100 : t))),
    },
  }
}

/**
 * Checks a batch before any work: every per-token input has the length of `modelInput`,
 * float inputs are finite as float32 (what the trainer computes in; 1e300 is finite as a
 * JavaScript number but infinite as float32), token ids are integers in range, and each
 * loss gets exactly the inputs it reads (`LOSS_INPUTS`). Fails with `InvalidInput`
 * carrying the issue (`BackendError.issue`), its message rendered from it. The one Datum
 * validator: the runner, the embedded trainer and the server all use it.
 * @since 0.1.0 @category validation
 */
export const validate = (
  data: ReadonlyArray<Datum>,
  lossFn: LossFn,
  options: CheckOptions & { readonly operation?: string } = {},
): Effect.Effect<void, BackendError> =>
  Effect.suspend(() => {
    const issue = checkAll(data, lossFn, options)
    return issue === undefined ? Effect.void : Effect.fail(invalid(options.operation ?? "validate", issue))
  })

/** An `InvalidInput` failure carrying `issue`, its message rendered from it. @since 0.1.0 @category constructors */
export const invalid = (operation: string, issue: DatumIssue): BackendError =>
  new BackendError({ reason: "InvalidInput", operation, message: render(issue), issue })

/** Model limits a batch is checked against, when known. @since 0.1.0 @category validation */
export interface CheckOptions {
  readonly vocabSize?: number
  /** the model's context length */
  readonly maxLength?: number
}

/** The largest finite float32. @since 0.1.0 @category constants */
export { FLOAT32_MAX }

/** Whether `v` is a number that stays finite when stored as float32. @since 0.1.0 @category validation */
export const isFiniteFloat32 = (v: unknown): v is number => typeof v === "number" && Number.isFinite(Math.fround(v))

/**
 * The first issue of a batch, or undefined: where it is (datum, field, position), the
 * value and what was expected. `DatumIssue.render` writes it as text.
 * @since 0.1.0 @category validation
 */
export const checkAll = (data: ReadonlyArray<Datum>, lossFn: LossFn, options: CheckOptions = {}): DatumIssue | undefined => {
  if (data.length === 0) return { field: [], expected: { _tag: "NonEmpty" } }
  for (const [d, datum] of data.entries()) {
    const issue = checkDatum(datum, lossFn, options)
    if (issue !== undefined) return { datum: d, ...issue }
  }
  return undefined
}

/** An issue of one datum, without its index. */
type Found = Omit<DatumIssue, "datum">

const inVocab = (t: unknown, vocabSize: number | undefined) =>
  typeof t === "number" && Number.isInteger(t) && t >= 0 && (vocabSize === undefined || t < vocabSize)

const checkDatum = (datum: Datum, lossFn: LossFn, options: CheckOptions): Found | undefined => {
  const { vocabSize, maxLength } = options
  const spec = LOSS_INPUTS[lossFn]
  const allowed = [...spec.required, ...spec.optional]
  const tokens = modelInputTokens(datum.modelInput)
  const L = tokens.length
  const modelInput = ["modelInput"]
  if (L === 0) return { field: modelInput, expected: { _tag: "NonEmpty" } }
  if (maxLength !== undefined && L > maxLength) return { field: modelInput, value: L, expected: { _tag: "WithinContext", length: L, contextLength: maxLength } }
  const bad = tokens.findIndex((t) => !inVocab(t, vocabSize))
  if (bad >= 0) return { field: modelInput, position: bad, value: tokens[bad], expected: { _tag: "InVocabulary", vocabSize, ignorable: false } }
  for (const key of spec.required) {
    if (datum.lossFnInputs[key] === undefined) return { field: ["lossFnInputs", key], expected: { _tag: "Required", lossFn, allowed } }
  }
  for (const [key, tensor] of Object.entries(datum.lossFnInputs)) {
    const field = ["lossFnInputs", key]
    if (!allowed.includes(key)) return { field, expected: { _tag: "Allowed", lossFn, allowed } }
    const issue = checkTensor(key, tensor, L, vocabSize)
    if (issue !== undefined) return { field, ...issue }
  }
  return undefined
}

/** The first issue of one per-token input of a datum of `L` tokens. */
const checkTensor = (key: string, tensor: TensorData, L: number, vocabSize: number | undefined): Omit<Found, "field"> | undefined => {
  if (tensor.data.length !== L) return { value: tensor.data.length, expected: { _tag: "Length", length: tensor.data.length, expected: L } }
  if (tensor.shape !== undefined && (tensor.shape.length !== 1 || tensor.shape[0] !== L)) {
    return { value: tensor.shape, expected: { _tag: "Shape", shape: tensor.shape, expected: L } }
  }
  for (let i = 0; i < L; i++) {
    const v: unknown = tensor.data[i]
    const at = { position: i, value: v }
    if (typeof v !== "number" || !Number.isFinite(v)) return { ...at, expected: { _tag: "Finite" } }
    if (key === "target_tokens") {
      if (v !== -100 && !inVocab(v, vocabSize)) return { ...at, expected: { _tag: "InVocabulary", vocabSize, ignorable: true } }
      continue
    }
    if (!isFiniteFloat32(v)) return { ...at, expected: { _tag: "Float32" } }
    if (key === "logprobs" && v > 1e-6) return { ...at, expected: { _tag: "LogProbability" } }
    if (key === "weights" && v < 0) return { ...at, expected: { _tag: "NonNegative" } }
  }
  return undefined
}

/** One turn of an episode, as tokens: what the model saw, what it sampled, and with which log-probs. @since 0.1.0 @category models */
export interface TurnTokens {
  /** the input of this turn's sample request (the prompt, then every earlier turn and observation) */
  readonly input: ReadonlyArray<number>
  readonly sampled: ReadonlyArray<number>
  /** sampler log-probs of `sampled` */
  readonly logprobs: ReadonlyArray<number>
}

/**
 * The Datums of one episode with one advantage. Sampled tokens train with their sampler
 * log-probs; every other position (prompt, observations) has advantage 0 and never
 * trains. When each turn's input extends the previous turn's input and sampled tokens,
 * the episode is one Datum (its last input ++ last turn); otherwise one Datum per turn.
 * @since 0.1.0 @category constructors
 */
export const episode = (turns: ReadonlyArray<TurnTokens>, advantage: number): Array<Datum> => {
  if (turns.length === 0) return []
  if (!mergeable(turns)) return turns.map((t) => rl({ prompt: t.input, completion: t.sampled, samplerLogprobs: t.logprobs, advantage }))
  const last = turns[turns.length - 1]!
  const tokens = [...last.input, ...last.sampled]
  const logprobs = new Array<number>(tokens.length).fill(0)
  const advantages = new Array<number>(tokens.length).fill(0)
  for (const [k, t] of turns.entries()) {
    if (t.logprobs.length !== t.sampled.length) {
      throw new Error(`Datum.episode: turn ${k} has ${t.logprobs.length} log-probs for ${t.sampled.length} sampled tokens; a sampler gives one per token`)
    }
    t.sampled.forEach((_, j) => {
      logprobs[t.input.length + j] = t.logprobs[j]! // one per sampled token, checked above
      advantages[t.input.length + j] = advantage
    })
  }
  return [{ modelInput: modelInputFromTokens(tokens), lossFnInputs: { logprobs: float32(logprobs), advantages: float32(advantages) } }]
}

/**
 * Whether an episode's turns make one Datum (each turn's input extends the last turn's
 * input and sampled tokens).
 * @since 0.1.0 @category combinators
 */
export const mergeable = (turns: ReadonlyArray<TurnTokens>): boolean =>
  turns.every((t, i) => {
    if (i === 0) return true
    const prev = turns[i - 1]!
    const head = prev.input.length + prev.sampled.length
    if (t.input.length < head) return false
    for (let j = 0; j < prev.input.length; j++) if (t.input[j] !== prev.input[j]) return false
    for (let j = 0; j < prev.sampled.length; j++) if (t.input[prev.input.length + j] !== prev.sampled[j]) return false
    return true
  })
