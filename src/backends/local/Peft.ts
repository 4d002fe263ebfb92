/**
 * The embedded model's LoRA adapter in PEFT's layout, for tools that load PEFT adapters
 * (`PeftModel.from_pretrained(base, dir)`, vLLM's `--lora-modules`, the official Tinker
 * SDK's `tinker checkpoint download`): `adapter_model.safetensors` (float32 tensors named
 * `base_model.model.<module path>.lora_A.weight` [r, in] and `...lora_B.weight` [out, r])
 * and `adapter_config.json`. The module paths and the transposition are explained in
 * `src/app/Export.ts`.
 *
 * @since 0.1.0
 */
import type * as Checkpoint from "./Checkpoint.ts"
import { LORA_TARGETS, type LoraTarget } from "./Model.ts"


/** A projection's module path in the export (see the table in the module doc). @since 0.1.0 @category constants */
export const MODULE_NAMES: Record<LoraTarget, string> = {
  q: "self_attn.q_proj",
  k: "self_attn.k_proj",
  v: "self_attn.v_proj",
  o: "self_attn.o_proj",
  w1: "mlp.up_proj",
  w2: "mlp.down_proj",
}

/** A projection's module name without its block (`q_proj`, `up_proj`): the last part of its path. */
const moduleName = (target: LoraTarget): string => {
  const path = MODULE_NAMES[target]
  return path.slice(path.lastIndexOf(".") + 1)
}

/** The module path of layer `i`'s projection `target`. @since 0.1.0 @category combinators */
export const modulePath = (layer: number, target: LoraTarget): string => `model.layers.${layer}.${MODULE_NAMES[target]}`

/** A float32 tensor to write. @since 0.1.0 @category models */
export interface Tensor {
  readonly shape: ReadonlyArray<number>
  readonly data: Float32Array
}

/**
 * The safetensors encoding of float32 tensors: an 8-byte little-endian header length,
 * a JSON header (`{ name: { dtype: "F32", shape, data_offsets } , __metadata__ }`)
 * padded with spaces to a multiple of 8, then the data, little-endian, in name order.
 * @since 0.1.0 @category combinators
 */
export const encodeSafetensors = (tensors: Readonly<Record<string, Tensor>>, metadata: Readonly<Record<string, string>> = {}): Uint8Array => {
  // in name order (names are unique: the order `sort()` gives the names)
  const named = Object.entries(tensors).sort(([a], [b]) => (a < b ? -1 : 1))
  const header: Record<string, unknown> = {}
  if (Object.keys(metadata).length > 0) header["__metadata__"] = metadata
  let offset = 0
  for (const [name, t] of named) {
    const n = t.shape.reduce((a, b) => a * b, 1)
    if (n !== t.data.length) throw new Error(`tensor ${name}: shape ${JSON.stringify(t.shape)} does not hold ${t.data.length} values`)
    header[name] = { dtype: "F32", shape: [...t.shape], data_offsets: [offset, offset + 4 * n] }
    offset += 4 * n
  }
  let json = JSON.stringify(header)
  const raw = Buffer.byteLength(json, "utf8")
  json += " ".repeat((8 - ((8 + raw) % 8)) % 8)
  const headerBytes = Buffer.from(json, "utf8")
  const out = Buffer.alloc(8 + headerBytes.length + offset)
  out.writeBigUInt64LE(BigInt(headerBytes.length), 0)
  headerBytes.copy(out, 8)
  const view = new DataView(out.buffer, out.byteOffset, out.byteLength)
  let p = 8 + headerBytes.length
  for (const [, t] of named) {
    for (const v of t.data) {
      view.setFloat32(p, v, true)
      p += 4
    }
  }
  return out
}

/** `data` ([rows, cols] row-major, rows · cols values: a decoded tensor holds its shape's size) as [cols, rows]. */
const transpose = (data: Float32Array, rows: number, cols: number): Float32Array => {
  const out = new Float32Array(data.length)
  for (let i = 0; i < rows; i++) for (let j = 0; j < cols; j++) out[j * rows + i] = data[i * cols + j]!
  return out
}

/** What a PEFT adapter folder holds. @since 0.1.0 @category models */
export interface PeftAdapter {
  readonly tensors: Record<string, Tensor>
  readonly config: Record<string, unknown>
}

/**
 * A trainer state file's adapter in PEFT's layout (names, transposed shapes, config).
 * Fails with a message when the state holds no LoRA adapter.
 * @since 0.1.0 @category combinators
 */
export const peftAdapter = (state: Checkpoint.CheckpointFile, baseModel: string): PeftAdapter | string => {
  if (state.meta["kind"] !== "trainer-state") return `not a trainer state file (kind ${JSON.stringify(state.meta["kind"])})`
  const lora = state.meta["lora"] as { rank?: unknown; alpha?: unknown; targets?: unknown } | null | undefined
  if (state.meta["mode"] !== "lora" || lora === null || lora === undefined) {
    return `holds ${String(state.meta["mode"])} weights, not a LoRA adapter: only LoRA runs can be exported as an adapter`
  }
  const r = Number(lora.rank)
  const alpha = Number(lora.alpha)
  const tensors: Record<string, Tensor> = {}
  const targets = new Set<LoraTarget>()
  for (const [key, data] of Object.entries(state.tensors)) {
    const m = /^param\/l(\d+)\.(\w+)\.(A|B)$/.exec(key)
    if (m === null) continue
    const target = m[2] as LoraTarget
    if (!LORA_TARGETS.includes(target)) return `unknown projection ${JSON.stringify(m[2])} in ${key}`
    const shape = state.shapes[key]
    if (shape === undefined || shape.length !== 2) return `${key} has shape ${JSON.stringify(shape)}; a LoRA matrix has two dimensions`
    const [rows, cols] = shape as [number, number]
    const peft = `base_model.model.${modulePath(Number(m[1]), target)}.lora_${m[3]}.weight`
    // gyre A [in, r] -> lora_A [r, in]; gyre B [r, out] -> lora_B [out, r]
    tensors[peft] = { shape: [cols, rows], data: transpose(data, rows, cols) }
    targets.add(target)
  }
  if (Object.keys(tensors).length === 0) return "holds no LoRA matrices (param/l<i>.<proj>.A|B)"
  const config = {
    peft_type: "LORA",
    task_type: "CAUSAL_LM",
    r,
    lora_alpha: alpha,
    lora_dropout: 0,
    bias: "none",
    fan_in_fan_out: false,
    target_modules: LORA_TARGETS.filter((t) => targets.has(t)).map(moduleName),
    base_model_name_or_path: baseModel,
    inference_mode: true,
    modules_to_save: null,
    use_rslora: false,
  }
  return { tensors, config }
}


/** The name of gyre's own state file inside a checkpoint archive. @since 0.1.0 @category constants */
export const STATE_IN_ARCHIVE = "gyre-state.ckpt"

/**
 * The files of a checkpoint archive, from a trainer state file's bytes: the PEFT adapter
 * (`adapter_config.json`, `adapter_model.safetensors`), `checkpoint_complete` (the
 * official SDK's download refuses an archive without it) and the state file itself as
 * `gyre-state.ckpt` (what `gyre export` and `load_state` read). A message when the state
 * holds no LoRA adapter.
 * @since 0.1.0 @category combinators
 */
export const archiveFiles = (
  stateBytes: Uint8Array,
  decode: (bytes: Uint8Array) => Checkpoint.CheckpointFile,
  baseModel: string,
): ReadonlyArray<{ readonly name: string; readonly bytes: Uint8Array }> | string => {
  let state: Checkpoint.CheckpointFile
  try {
    state = decode(stateBytes)
  } catch (e) {
    return `not a gyre state file: ${e instanceof Error ? e.message : String(e)}`
  }
  const adapter = peftAdapter(state, baseModel)
  if (typeof adapter === "string") return adapter
  const text = (s: string) => new TextEncoder().encode(s)
  return [
    { name: "adapter_config.json", bytes: text(`${JSON.stringify(adapter.config, null, 2)}\n`) },
    { name: "adapter_model.safetensors", bytes: encodeSafetensors(adapter.tensors, { format: "pt" }) },
    { name: "checkpoint_complete", bytes: new Uint8Array(0) },
    { name: STATE_IN_ARCHIVE, bytes: stateBytes },
  ]
}
