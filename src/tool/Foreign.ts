/**
 * Tools users already wrote, read as gyre sees a tool: their input schema as JSON Schema
 * (the arguments gyre decodes and a bracket call's words), and how to validate the
 * arguments the way their own framework would before calling them.
 *
 * An input schema may be given as:
 * - a JSON Schema object (an MCP tool's `inputSchema`, an OpenAI function's `parameters`);
 * - a Standard Schema that can write JSON Schema (zod 4, and others that implement
 *   `~standard.jsonSchema`): its JSON Schema is read, and its own `validate` runs before
 *   the handler, so the handler gets what the schema outputs (defaults, transforms);
 * - the AI SDK's `jsonSchema(...)` wrapper (its `jsonSchema` field, and its `validate`).
 *
 * @since 0.1.0
 */
import { Effect, Predicate } from "effect"

/** What validating arguments gave: the value the handler takes, or why they are wrong. */
export type Validated = { readonly value: unknown } | { readonly issues: string }

/** @since 0.1.0 @category models */
export interface ForeignSchema {
  readonly jsonSchema: Readonly<Record<string, unknown>>
  /** the schema's own validation, when it has one */
  readonly validate?: ((value: unknown) => Effect.Effect<Validated>) | undefined
}

interface StandardLike {
  readonly "~standard": {
    readonly validate: (value: unknown) => unknown
    readonly jsonSchema?: { readonly input?: (options: { readonly target: string }) => unknown }
  }
}

const isStandard = (u: unknown): u is StandardLike => Predicate.isObject(u) && Predicate.isObject((u as { "~standard"?: unknown })["~standard"])

const issuesText = (issues: ReadonlyArray<{ readonly message: string; readonly path?: ReadonlyArray<unknown> }>): string =>
  issues.map((i) => `${(i.path ?? []).map((p) => (Predicate.isObject(p) && "key" in p ? String(p.key) : String(p))).join(".") || "arguments"}: ${i.message}`).join("; ")

/** A Standard Schema's `validate`, as an Effect. */
const standardValidate = (schema: StandardLike) => (value: unknown): Effect.Effect<Validated> =>
  Effect.promise(async () => {
    const result = (await schema["~standard"].validate(value)) as { readonly value?: unknown; readonly issues?: ReadonlyArray<{ readonly message: string; readonly path?: ReadonlyArray<unknown> }> }
    return result.issues !== undefined ? { issues: issuesText(result.issues) } : { value: result.value }
  })

/** The AI SDK wrapper's `validate` (`{ success, value }` or `{ success: false, error }`), as an Effect. */
const wrapperValidate = (validate: (value: unknown) => unknown) => (value: unknown): Effect.Effect<Validated> =>
  Effect.promise(async () => {
    const r = (await validate(value)) as { readonly success: boolean; readonly value?: unknown; readonly error?: unknown }
    return r.success ? { value: r.value } : { issues: r.error instanceof Error ? r.error.message : String(r.error) }
  })

/**
 * Reads an input schema (see the module's comment); a `TypeError` names what it is not.
 * @since 0.1.0 @category constructors
 */
export const read = (schema: unknown, where: string): ForeignSchema => {
  if (isStandard(schema)) {
    const json = schema["~standard"].jsonSchema?.input?.({ target: "draft-07" })
    if (!Predicate.isObject(json)) throw new TypeError(`${where}: this Standard Schema cannot write JSON Schema (~standard.jsonSchema); give zod 4 or a JSON Schema object`)
    return { jsonSchema: json as Record<string, unknown>, validate: standardValidate(schema) }
  }
  if (Predicate.isObject(schema) && Predicate.isObject((schema as { jsonSchema?: unknown }).jsonSchema) && !Predicate.isPromiseLike((schema as { jsonSchema?: unknown }).jsonSchema)) {
    const wrapper = schema as { readonly jsonSchema: Record<string, unknown>; readonly validate?: (value: unknown) => unknown }
    return { jsonSchema: wrapper.jsonSchema, validate: typeof wrapper.validate === "function" ? wrapperValidate(wrapper.validate.bind(wrapper)) : undefined }
  }
  if (Predicate.isObject(schema) && ("type" in schema || "properties" in schema || "$schema" in schema)) return { jsonSchema: schema as Record<string, unknown> }
  throw new TypeError(`${where}: the input schema must be a JSON Schema object, a zod 4 schema (or another Standard Schema with JSON Schema) or the AI SDK's jsonSchema(...)`)
}
