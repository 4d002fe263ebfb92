/**
 * A tool's input JSON Schema -> a Schema decoder for its arguments, through Effect's own
 * JSON Schema importer (draft 2020-12, or draft-07 when `$schema` says so): objects with
 * `properties`/`required`/`additionalProperties`, strings, numbers, integers, booleans,
 * null, arrays, `enum`, `const`, nested objects, `anyOf`/`oneOf`/`allOf`, local `$ref`s,
 * and the usual bounds (`minimum`, `maxLength`, `pattern`, ...).
 *
 * A schema it cannot turn is refused, naming the keyword: one the importer has no
 * equivalent for (`if`, `contains`, `dependentSchemas`, ...), and one that JSON Schema
 * does not define (an unknown keyword would otherwise be ignored silently; `x-` extensions
 * are annotations and pass).
 *
 * @since 0.1.0
 */
import { JsonSchema, Predicate, Result, Schema, SchemaRepresentation } from "effect"

/** JSON Schema's keywords (draft-07 and 2020-12), and the annotations that validate nothing. */
const KEYWORDS = new Set([
  "type", "enum", "const", "properties", "required", "additionalProperties", "patternProperties", "propertyNames",
  "minProperties", "maxProperties", "items", "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems",
  "contains", "minContains", "maxContains", "minLength", "maxLength", "pattern", "format", "minimum", "maximum",
  "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "anyOf", "oneOf", "allOf", "not", "if", "then", "else",
  "$ref", "$defs", "definitions", "$id", "$schema", "$anchor", "$comment", "$dynamicRef", "$dynamicAnchor", "$vocabulary",
  "dependentRequired", "dependentSchemas", "dependencies", "unevaluatedItems", "unevaluatedProperties",
  "contentEncoding", "contentMediaType", "contentSchema", "title", "description", "default", "examples", "deprecated",
  "readOnly", "writeOnly",
])
/** keywords whose value is a map from names to schemas */
const SCHEMA_MAPS = new Set(["properties", "patternProperties", "$defs", "definitions", "dependentSchemas"])
/** keywords whose value is a schema or a list of schemas */
const SCHEMAS = new Set([
  "items", "prefixItems", "additionalItems", "additionalProperties", "propertyNames", "contains", "not", "if", "then",
  "else", "anyOf", "oneOf", "allOf", "unevaluatedItems", "unevaluatedProperties", "contentSchema",
])

/** Why a schema is refused. @since 0.1.0 @category models */
export interface Refusal {
  readonly keyword: string
  /** where, as a JSON path from the schema's root (e.g. `properties.item`) */
  readonly at: string
  readonly message: string
}

/** The first keyword JSON Schema does not define, anywhere in the schema. */
const unknownKeyword = (node: unknown, at: ReadonlyArray<string>): Refusal | undefined => {
  if (!Predicate.isObject(node) || Array.isArray(node)) return undefined
  for (const [key, value] of Object.entries(node)) {
    if (!KEYWORDS.has(key) && !key.startsWith("x-")) {
      return { keyword: key, at: at.join("."), message: `"${key}" is not a JSON Schema keyword gyre knows, so what it asks would not be checked` }
    }
    const inner = SCHEMA_MAPS.has(key) && Predicate.isObject(value)
      ? Object.entries(value).map(([name, s]) => unknownKeyword(s, [...at, key, name])).find((r) => r !== undefined)
      : SCHEMAS.has(key)
      ? (Array.isArray(value) ? value : [value]).map((s, i) => unknownKeyword(s, Array.isArray(value) ? [...at, key, String(i)] : [...at, key])).find((r) => r !== undefined)
      : undefined
    if (inner !== undefined) return inner
  }
  return undefined
}

/**
 * Where a refused keyword is: `["schema"]["properties"]["item"]["if"]` -> `properties.item`
 * (a path that ends with the keyword itself stops before it).
 */
const pathOf = (message: string, keyword: string): string => {
  const line = /\n\s*at (.*)$/.exec(message)?.[1] ?? ""
  // group 1 is not optional: every match has it
  const parts = [...line.matchAll(/\["([^"]*)"\]/g)].map((m) => m[1]!)
  const inside = parts[0] === "schema" ? parts.slice(1) : parts
  return (inside.at(-1) === keyword ? inside.slice(0, -1) : inside).join(".")
}

/** The keyword an importer's message names: `keyword "if"`, `Unsupported $ref`, a quoted JSON Schema keyword, else the last part of its path. */
const keywordOf = (message: string): string =>
  /keyword "([^"]+)"/.exec(message)?.[1] ?? /^Unsupported (\$\w+)/.exec(message)?.[1] ??
    [...message.matchAll(/"([^"]+)"/g)].map((m) => m[1]!).find((k) => KEYWORDS.has(k)) ??
    /\["([^"]+)"\]\s*$/.exec(message)?.[1] ?? "(unknown)"

/**
 * The decoder for a tool's arguments, or why the schema is refused.
 *
 * @example
 * InputSchema.toSchema({ type: "object", properties: { item: { type: "string" } }, required: ["item"] })
 * // => Result.succeed(<a Schema decoding { item: string }>)
 * InputSchema.toSchema({ type: "object", properties: { item: { if: { type: "string" } } } })
 * // => Result.fail({ keyword: "if", at: "properties.item", ... })
 * @since 0.1.0 @category constructors
 */
export const toSchema = (inputSchema: Readonly<Record<string, unknown>>): Result.Result<Schema.Codec<unknown, unknown>, Refusal> => {
  const unknown = unknownKeyword(inputSchema, [])
  if (unknown !== undefined) return Result.fail(unknown)
  try {
    const draft07 = typeof inputSchema.$schema === "string" && inputSchema.$schema.includes("draft-07")
    const document = draft07 ? JsonSchema.fromSchemaDraft07(inputSchema as JsonSchema.JsonSchema) : JsonSchema.fromSchemaDraft2020_12(inputSchema as JsonSchema.JsonSchema)
    // a server's patterns are applied (Unicode mode), not skipped
    const schema: Schema.Top = SchemaRepresentation.fromJsonSchemaDocument(document, { patterns: "apply" })
    return Result.succeed(schema as unknown as Schema.Codec<unknown, unknown>)
  } catch (e) {
    const message = e instanceof Error ? e.message : String(e)
    const keyword = keywordOf(message)
    return Result.fail({ keyword, at: pathOf(message, keyword), message: firstLine(message) })
  }
}

const firstLine = (text: string): string => {
  const end = text.indexOf("\n")
  return end < 0 ? text : text.slice(0, end)
}

/** Whether a property's schema is an array or an object (a type that says so, or `items` / `properties`). */
const isStructured = (schema: unknown): boolean => {
  if (!Predicate.isObject(schema)) return false
  const s = schema as { type?: unknown; items?: unknown; properties?: unknown }
  const types = Array.isArray(s.type) ? s.type : [s.type]
  return types.includes("array") || types.includes("object") || s.items !== undefined || s.properties !== undefined
}

/**
 * The properties of a tool's input schema that take an array or an object, which the
 * bracket syntax cannot carry (its call ends at the first `]`).
 *
 * @example
 * InputSchema.structured({ type: "object", properties: { entities: { type: "array" }, q: { type: "string" } } }) // => ["entities"]
 * @since 0.1.0 @category destructors
 */
export const structured = (inputSchema: Readonly<Record<string, unknown>>): ReadonlyArray<string> =>
  Predicate.isObject(inputSchema.properties) ? Object.entries(inputSchema.properties as Record<string, unknown>).filter(([, s]) => isStructured(s)).map(([name]) => name) : []

/** A JSON value's text for a positional argument of the schema's type: "3" -> 3 for a number. */
const coerce = (text: string, schema: unknown): unknown => {
  const type = Predicate.isObject(schema) ? (schema as { type?: unknown }).type : undefined
  const types = Array.isArray(type) ? type : [type]
  if ((types.includes("number") || types.includes("integer")) && /^-?\d+(\.\d+)?([eE][-+]?\d+)?$/.test(text)) return Number(text)
  if (types.includes("boolean") && (text === "true" || text === "false")) return text === "true"
  return text
}

/**
 * How the bracket syntax reads a call's argument text: a JSON object as is, else words
 * given to the schema's properties in order, numbers and booleans read as such, the last
 * string property taking the rest. `[stock pen]` -> `{ item: "pen" }`.
 *
 * @example
 * const parse = InputSchema.positional({ type: "object", properties: { value: { type: "number" }, unit: { type: "string" } } })
 * parse("3 km")          // => { value: 3, unit: "km" }
 * parse('{"value": 3}')  // => { value: 3 }
 * @since 0.1.0 @category constructors
 */
export const positional = (inputSchema: Readonly<Record<string, unknown>>) => {
  const properties = Predicate.isObject(inputSchema.properties) ? Object.entries(inputSchema.properties as Record<string, unknown>) : []
  return (text: string): unknown => {
    const trimmed = text.trim()
    if (trimmed.startsWith("{")) {
      try {
        return JSON.parse(trimmed)
      } catch {
        return trimmed
      }
    }
    const words = trimmed.length === 0 ? [] : trimmed.split(/\s+/)
    const out: Record<string, unknown> = {}
    properties.forEach(([name, schema], i) => {
      const word = words[i]
      if (word === undefined) return // fewer words than properties
      const last = i === properties.length - 1
      out[name] = coerce(last ? words.slice(i).join(" ") : word, schema)
    })
    return out
  }
}
