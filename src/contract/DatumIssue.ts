/**
 * What is wrong with a batch of Datums, as data: which datum, which field, which
 * position, the value found and what was expected. `Datum.checkAll` (the one Datum
 * validator) produces an issue; code that needs to know where the problem is (the datum
 * of a step behind a micro-batch, the wire field of the HTTP server) reads and maps the
 * issue, never its text. The text a user reads is rendered from the issue by
 * {@link render}, under a table of names: gyre's own ({@link GYRE_NAMES}) or a wire's.
 *
 * @since 0.1.0
 */
import { Schema } from "effect"

/** The largest finite float32. @since 0.1.0 @category constants */
export const FLOAT32_MAX = 3.4028234663852886e38

/** What a field or a value should have been. @since 0.1.0 @category models */
export const Expected = Schema.TaggedUnion({
  /** at least one datum (the batch), at least one token (`modelInput`) */
  NonEmpty: {},
  /** at most the model's context length */
  WithinContext: { length: Schema.Int, contextLength: Schema.Int },
  /** a token id in `[0, vocabSize)` (any non-negative integer when the size is unknown); `ignorable`: -100 is allowed */
  InVocabulary: { vocabSize: Schema.optional(Schema.Int), ignorable: Schema.Boolean },
  /** an input the loss reads */
  Required: { lossFn: Schema.String, allowed: Schema.Array(Schema.String) },
  /** only the inputs the loss reads */
  Allowed: { lossFn: Schema.String, allowed: Schema.Array(Schema.String) },
  /** one value per token of `modelInput` */
  Length: { length: Schema.Int, expected: Schema.Int },
  /** shape `[expected]` */
  Shape: { shape: Schema.Array(Schema.Number), expected: Schema.Int },
  /** a finite number */
  Finite: {},
  /** a number that stays finite as float32 */
  Float32: {},
  /** a log-probability (at most 0) */
  LogProbability: {},
  /** a non-negative weight */
  NonNegative: {},
})
export type Expected = typeof Expected.Type

/**
 * One problem of a batch. `datum` is the datum's index in the batch it was found in
 * (absent for the batch itself), `field` the path of the field in the datum in gyre's
 * names (`["modelInput"]`, `["lossFnInputs", "advantages"]`; empty for the batch),
 * `position` the token position in that field.
 * @since 0.1.0 @category models
 */
export const DatumIssue = Schema.Struct({
  datum: Schema.optional(Schema.Int),
  field: Schema.Array(Schema.String),
  position: Schema.optional(Schema.Int),
  value: Schema.optional(Schema.Unknown),
  expected: Expected,
})
export type DatumIssue = typeof DatumIssue.Type

/**
 * The names a location is written in: the batch's own name, each field path segment's
 * name (a segment missing from the table keeps its name), and how a position in a
 * per-token input is written.
 * @since 0.1.0 @category models
 */
export interface Names {
  readonly data: string
  readonly fields: Readonly<Record<string, string>>
  readonly element: (position: number) => string
}

/** gyre's names: `data[2].lossFnInputs.advantages[3]`. @since 0.1.0 @category constants */
export const GYRE_NAMES: Names = { data: "data", fields: {}, element: (p) => `[${p}]` }

/** The issue's datum moved by `offset` (a datum of a chunk that starts at `offset` of a larger batch). @since 0.1.0 @category combinators */
export const shiftDatum = (issue: DatumIssue, offset: number): DatumIssue =>
  issue.datum === undefined || offset === 0 ? issue : { ...issue, datum: issue.datum + offset }

/** Where the issue is: `data[2].lossFnInputs.advantages`, in `names`. @since 0.1.0 @category formatting */
export const location = (issue: DatumIssue, names: Names = GYRE_NAMES): string =>
  [issue.datum === undefined ? names.data : `${names.data}[${issue.datum}]`, ...issue.field.map((f) => names.fields[f] ?? f)].join(".")

const vocabulary = (vocabSize: number | undefined) => (vocabSize === undefined ? "(token ids are non-negative integers)" : `[0, ${vocabSize})`)

/**
 * The issue as one line of text, in `names`: the only place an issue becomes text.
 * @since 0.1.0 @category formatting
 */
export const render = (issue: DatumIssue, names: Names = GYRE_NAMES): string => {
  const at = location(issue, names)
  const p = issue.position ?? 0
  const element = `${at}${names.element(p)}`
  const v = String(issue.value)
  const e = issue.expected
  switch (e._tag) {
    case "NonEmpty":
      return issue.datum === undefined ? `${at} is empty: send at least one Datum` : `${at} is empty`
    case "WithinContext":
      return `${at} has ${e.length} tokens, more than the model's context length ${e.contextLength}`
    case "InVocabulary":
      return e.ignorable
        ? `${element} = ${v} is outside the vocabulary ${vocabulary(e.vocabSize)} (use -100 to ignore a position)`
        : `${at} token ${v} at position ${p} is outside the vocabulary ${vocabulary(e.vocabSize)}`
    case "Required":
      return `${at} is required by ${e.lossFn} (inputs: ${e.allowed.join(", ")})`
    case "Allowed":
      return `${at} is not an input of ${e.lossFn}; allowed inputs: ${e.allowed.join(", ")}`
    case "Length":
      return `${at} has length ${e.length}, but ${names.fields["modelInput"] ?? "modelInput"} has length ${e.expected}; every per-token input has shape [L]`
    case "Shape":
      return `${at} has shape ${JSON.stringify(e.shape)}, expected [${e.expected}]`
    case "Finite":
      return `${element} is ${v}, not a finite number`
    case "Float32":
      return `${element} = ${v} overflows float32 (|x| must be at most ${FLOAT32_MAX.toExponential(4)})`
    case "LogProbability":
      return `${element} = ${v}; a log-probability must be <= 0`
    case "NonNegative":
      return `${element} = ${v} is negative; weights must be >= 0`
  }
}
