/**
 * The one Schema decoding helper at gyre's boundaries (the HTTP backend, tokenizer files):
 * decodes an unknown value and renders a failure as `path: message`, with the path in
 * dotted form (`forward_backward_input.data[2].loss_fn_inputs.advantages`). The path and
 * message are read from Schema's issue tree, not from its formatted text.
 *
 * @since 0.1.0
 */
import { Result, Schema, SchemaIssue } from "effect"

/** Schema's issue tree flattened to its leaves, each with its path and message. */
const leaves = SchemaIssue.makeFormatterStandardSchemaV1()

/** A path from the issue tree in dotted form: `a.b[0].c`. */
const dotted = (path: ReadonlyArray<PropertyKey | { readonly key: PropertyKey }>): string =>
  path
    .map((p) => (typeof p === "object" ? p.key : p))
    .map((k, i) => (typeof k === "number" ? `[${k}]` : i === 0 ? String(k) : `.${String(k)}`))
    .join("")

/** The value at `path` in `input`, when there is one. */
const valueAt = (input: unknown, path: ReadonlyArray<PropertyKey | { readonly key: PropertyKey }>): { readonly value: unknown } | undefined => {
  let at: unknown = input
  for (const p of path) {
    const key = typeof p === "object" ? p.key : p
    if (typeof at !== "object" || at === null || !Object.hasOwn(at, key)) return undefined
    at = (at as Record<PropertyKey, unknown>)[key]
  }
  return { value: at }
}

/** The longest rendering of an offending value in a message. */
const VALUE_CHARS = 80

/** A value as JSON (its string form when JSON has none), cut to `VALUE_CHARS`. */
export const shortValue = (value: unknown): string => {
  let text: string
  try {
    text = JSON.stringify(value) ?? String(value)
  } catch {
    text = String(value)
  }
  return text.length > VALUE_CHARS ? `${text.slice(0, VALUE_CHARS - 3)}...` : text
}

/**
 * A Schema issue as one line: `path: message` for each leaf (joined by `; `), the path in
 * dotted form under `prefix`; a leaf at the root is `prefix: message` (just the message
 * without a prefix). Given the decoded `input`, each leaf also shows the value found at
 * its path (`, got 1.5`, cut to 80 characters).
 * @since 0.1.0 @category combinators
 */
export const formatIssue = (issue: SchemaIssue.Issue, prefix = "", input?: { readonly value: unknown }): string =>
  leaves(issue)
    .issues.map(({ path, message }) => {
      const at = dotted(path ?? [])
      const full = prefix === "" ? at : at === "" ? prefix : `${prefix}.${at}`
      const found = input === undefined ? undefined : valueAt(input.value, path ?? [])
      const text = found === undefined ? message : `${message}, got ${shortValue(found.value)}`
      return full === "" ? text : `${full}: ${text}`
    })
    .join("; ")

/** What Schema says of a field a strict decode does not know, and what gyre says instead. */
const EXCESS = /Expected no excess property/g
const UNKNOWN_FIELD = "unknown field: not part of this protocol, or not implemented here (leave it out)"

/**
 * Decodes `value` with `schema`; a failure is the issue as one line naming the field.
 * `strict`: a field the schema does not declare is an error naming it (Schema drops
 * unknown fields otherwise), for a server that must not ignore what a client asks for.
 * @since 0.1.0 @category combinators
 */
export const decode = <S extends Schema.ConstraintDecoder<unknown>>(schema: S, prefix = "", options: { readonly strict?: boolean } = {}) => {
  const run = Schema.decodeUnknownResult(schema)
  const parse = options.strict === true ? { onExcessProperty: "error" as const, errors: "all" as const } : undefined
  return (value: unknown): Result.Result<S["Type"], string> => {
    const r = run(value, parse)
    return Result.isSuccess(r) ? Result.succeed(r.success) : Result.fail(formatIssue(r.failure.issue, prefix).replace(EXCESS, UNKNOWN_FIELD))
  }
}
