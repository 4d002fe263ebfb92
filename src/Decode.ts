/**
 * The one Schema decoding helper at gyre's boundaries (the HTTP backend, tokenizer files):
 * decodes an unknown value and renders a failure as `path: message`, with the path in
 * dotted form (`forward_backward_input.data[2].loss_fn_inputs.advantages`).
 *
 * @since 0.1.0
 */
import { Result, Schema } from "effect"

/** SchemaError text -> `path: message`, with the path in dotted form under `prefix`. @since 0.1.0 @category combinators */
export const formatIssue = (message: string, prefix = ""): string => {
  const lines = message.split("\n")
  const at = lines.findIndex((l) => /^\s*at \[/.test(l))
  const dotted = (raw: string) =>
    raw
      .trim()
      .replace(/^at /, "")
      .replace(/\["([^"]*)"\]/g, (_, k: string) => `.${k}`)
      .replace(/^\./, "")
  if (at < 0) return prefix === "" ? message.replace(/\n\s*/g, " ") : `${prefix}: ${message.replace(/\n\s*/g, " ")}`
  const path = dotted(lines[at]!)
  const full = prefix === "" ? path : path === "" ? prefix : `${prefix}.${path}`
  const text = lines.filter((_, i) => i !== at).join(" ").trim()
  return `${full === "" ? "body" : full}: ${text}`
}

/**
 * Decodes `value` with `schema`; a failure is the issue as one line naming the field.
 * @since 0.1.0 @category combinators
 */
export const decode = <S extends Schema.ConstraintDecoder<unknown>>(schema: S, prefix = "") => {
  const run = Schema.decodeUnknownResult(schema)
  return (value: unknown): Result.Result<S["Type"], string> => {
    const r = run(value)
    return Result.isSuccess(r) ? Result.succeed(r.success) : Result.fail(formatIssue(r.failure.message, prefix))
  }
}
