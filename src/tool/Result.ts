/**
 * What a tool's handler returned, as the text the model sees: a string as it is, a number
 * or boolean as written, any other JSON value as JSON. Anything else (undefined, a symbol,
 * a function, a bigint, an object JSON cannot hold, such as a circular one) is the tool's
 * failure, naming what it was, so the model sees an error observation and the rollout
 * keeps the whole message, never `=undefined;`. A very long text is cut for the model
 * (saying so); the rollout keeps it whole.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import { describeValue } from "../reward/Leaf.ts"

/** The default longest result shown to the model, in characters. @since 0.1.0 @category constants */
export const DEFAULT_MAX_RESULT_CHARS = 2_000

const notShowable = (what: string) => `returned ${what}, which is not a string, number or JSON value`

/** What a value is, in a message; objects JSON cannot hold are named without JSON. */
const describe = (u: unknown): string => {
  if (typeof u === "object" && u !== null && !Array.isArray(u) && !Effect.isEffect(u)) return `an object (${Object.prototype.toString.call(u)})`
  if (Array.isArray(u)) return "an array"
  return describeValue(u)
}

/**
 * The text of a handler's value, or why it has none.
 * @since 0.1.0 @category formatting
 */
export const show = (value: unknown): { readonly text: string } | { readonly error: string } => {
  switch (typeof value) {
    case "string":
      return { text: value }
    case "number":
    case "boolean":
      return { text: String(value) }
    case "undefined":
      return { error: notShowable("undefined") }
    case "symbol":
      return { error: notShowable(`a symbol (${String(value)})`) }
    case "function":
      return { error: notShowable("a function") }
    case "bigint":
      return { error: notShowable(`a bigint (${value}n)`) }
  }
  if (value === null) return { text: "null" }
  if (Effect.isEffect(value)) return { error: "returned an Effect inside its result (return the Effect itself, not a value holding one)" }
  let json: string | undefined
  try {
    json = JSON.stringify(value)
  } catch (e) {
    return { error: `${notShowable(describe(value))}: ${e instanceof Error ? e.message : String(e)}` }
  }
  return json === undefined ? { error: notShowable(describe(value)) } : { text: json }
}

/**
 * A result's text cut to `max` characters for the model, saying so; `full` is the whole
 * text when it was cut.
 * @since 0.1.0 @category formatting
 */
export const cut = (text: string, max: number): { readonly shown: string; readonly full?: string } =>
  text.length <= max ? { shown: text } : { shown: `${text.slice(0, max)}... [cut: ${text.length} characters, the first ${max} shown]`, full: text }
