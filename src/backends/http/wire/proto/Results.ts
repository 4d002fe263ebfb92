/**
 * Result messages <-> their JSON shapes: `ForwardBackwardOutput` (batched tensors in
 * `ArrayRecord`s) and `SampleResponse`, as the SDK's `proto/response_conv.py` reads them.
 *
 * @since 0.1.0
 */
import { create } from "@bufbuild/protobuf"
import { Result } from "effect"
import * as Wire from "../Wire.ts"
import { malformed, orMalformed, type ProtoError, readDtype, type SampleResponse, shapeOf, sortedEntries, sortedRecord, unsupported, WRITE } from "./Common.ts"
import { pack, reader, SIZE, unpack } from "./Packed.ts"
import * as Pb from "./tinker_public_pb.ts"

/** Padding of the dense top-k matrices: token 0 with this logprob (`types/sample_response.py`). @since 0.1.0 @category constants */
export const MASK_LOGPROB = -99999

const product = (dims: ReadonlyArray<number>) => dims.reduce((a, b) => a * b, 1)

const concat = (parts: ReadonlyArray<Uint8Array>): Uint8Array => {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.byteLength, 0))
  let at = 0
  for (const p of parts) {
    out.set(p, at)
    at += p.byteLength
  }
  return out
}

// ---------------------------------------------------------------------------
// ForwardBackwardOutput

type Output = Readonly<Record<string, Wire.TensorData>>

/** Outputs in a row that share one signature; never empty. */
type Group = [Output, ...Array<Output>]

const trailingOf = (t: Wire.TensorData) => (t.shape ?? [t.data.length]).slice(1)

/** A datum's fields, dtypes and trailing shapes: datums that agree share one ArrayRecord. */
const signature = (o: Output) =>
  sortedEntries(o)
    .map(([k, t]) => `${k}:${t.dtype}:${trailingOf(t).join(",")}`)
    .join(";")

const checkOutput = (o: Output, first: Output, at: string): Result.Result<void, ProtoError> => {
  const fields = sortedEntries(o)
  const keys = fields.map(([key]) => key)
  const expected = Object.keys(first).sort()
  if (keys.join(",") !== expected.join(",")) {
    return Result.fail(malformed(`${at} has fields [${keys.join(", ")}] but loss_fn_outputs[0] has [${expected.join(", ")}]; every datum's output has the same fields`))
  }
  for (const [key, t] of fields) {
    if (t.sparse_crow_indices !== undefined) return Result.fail(unsupported(`${at}.${key} is sparse; outputs travel dense`))
    const n = t.shape === undefined ? t.data.length : product(t.shape)
    if (n !== t.data.length) return Result.fail(malformed(`${at}.${key} has ${t.data.length} values for shape [${t.shape?.join(", ")}]`))
  }
  return Result.succeed(undefined)
}

/** A field of an output of a group: every output of a group has the fields of its first (same signature), so a missing one is a bug here. */
const fieldOf = (o: Output, key: string, at: string): Wire.TensorData => {
  const t = o[key]
  if (t === undefined) throw new Error(`${at}.${key} is missing from an output grouped with outputs that have it`)
  return t
}

const recordOf = (group: Group, at: number): Result.Result<Pb.ArrayRecord, ProtoError> =>
  Result.gen(function* () {
    const fields = yield* sortedRecord(group[0], (first, key) =>
      Result.gen(function* () {
        const [element, dtype] = WRITE[first.dtype]
        const parts: Array<Uint8Array> = []
        for (const [i, o] of group.entries()) {
          const where = `loss_fn_outputs[${at + i}]`
          parts.push(yield* orMalformed(pack(fieldOf(o, key, where).data, element, `${where}.${key}.data`)))
        }
        const offsets: Array<number> = [0]
        let end = 0
        for (const p of parts) {
          end += p.byteLength
          offsets.push(end)
        }
        return create(Pb.BatchedTensorSchema, {
          data: concat(parts),
          offsets: yield* orMalformed(pack(offsets, "int64", "offsets")),
          dtype,
          trailingShape: trailingOf(first).map(BigInt),
        })
      }),
    )
    return create(Pb.ArrayRecordSchema, { fields, numDatums: BigInt(group.length) })
  })

/** Checks each output against the first and packs each run of outputs that share a signature as one ArrayRecord. */
const recordsOf = (outputs: ReadonlyArray<Output>, first: Output): Result.Result<Array<Pb.ArrayRecord>, ProtoError> =>
  Result.gen(function* () {
    const records: Array<Pb.ArrayRecord> = []
    let group: Group | undefined = undefined
    let groupSignature = ""
    let start = 0
    for (const [i, o] of outputs.entries()) {
      yield* checkOutput(o, first, `loss_fn_outputs[${i}]`)
      const s = signature(o)
      if (group !== undefined && s === groupSignature) {
        group.push(o)
        continue
      }
      if (group !== undefined) records.push(yield* recordOf(group, start))
      group = [o]
      groupSignature = s
      start = i
    }
    if (group !== undefined) records.push(yield* recordOf(group, start))
    return records
  })

/** @since 0.1.0 @category encoding */
export const outputToProto = (out: Wire.ForwardBackwardOutput): Result.Result<Pb.ForwardBackwardOutput, ProtoError> =>
  Result.gen(function* () {
    const [first] = out.loss_fn_outputs
    const records = first === undefined ? [] : yield* recordsOf(out.loss_fn_outputs, first)
    const metrics = yield* sortedRecord(out.metrics, (v) => Result.succeed(Wire.metricFromWire(v)))
    return create(Pb.ForwardBackwardOutputSchema, { lossFnOutputType: out.loss_fn_output_type ?? "ArrayRecord", lossFnOutputs: records, metrics })
  })

/** One BatchedTensor -> per-datum tensors, sliced at its byte offsets: each datum's values read straight from the bytes. */
const unbatch = (bt: Pb.BatchedTensor, at: string): Result.Result<Array<Wire.TensorData>, ProtoError> =>
  Result.gen(function* () {
    const [element, dtype] = yield* readDtype(bt.dtype, at)
    const offsets = yield* orMalformed(unpack(bt.offsets, "int64", `${at}.offsets`))
    const size = SIZE[element]
    if (bt.data.byteLength % size !== 0) return yield* Result.fail(malformed(`${at}.data has ${bt.data.byteLength} bytes, not a whole number of ${element} values (${size} bytes each)`))
    const trailing = yield* shapeOf(bt.trailingShape, `${at}.trailing_shape`)
    const perRow = product(trailing)
    const read = reader(bt.data, element)
    const out: Array<Wire.TensorData> = []
    // i + 1 < offsets.length: both offsets are there
    for (let i = 0; i + 1 < offsets.length; i++) {
      const from = offsets[i]!
      const to = offsets[i + 1]!
      if (from < 0 || to < from || to > bt.data.byteLength || from % size !== 0 || to % size !== 0) {
        return yield* Result.fail(malformed(`${at}.offsets[${i}..${i + 1}] = ${from}..${to} does not slice ${bt.data.byteLength} bytes of ${size}-byte values`))
      }
      const data = yield* orMalformed(read(from / size, to / size, `${at}.data`))
      if (perRow > 0 && data.length % perRow !== 0) return yield* Result.fail(malformed(`${at}: datum ${i} has ${data.length} values, not a multiple of the trailing shape [${trailing.join(", ")}]`))
      out.push({ data, dtype, shape: [perRow > 0 ? data.length / perRow : 0, ...trailing] })
    }
    return out
  })

/** @since 0.1.0 @category decoding */
export const outputFromProto = (msg: Pb.ForwardBackwardOutput): Result.Result<Wire.ForwardBackwardOutput, ProtoError> =>
  Result.gen(function* () {
    const metrics: Record<string, Wire.MetricValue> = {}
    for (const [k, v] of Object.entries(msg.metrics)) metrics[k] = Wire.metricToWire(v)
    if (msg.lossFnOutputs.length === 0) return { loss_fn_output_type: msg.lossFnOutputType || "ArrayRecord", loss_fn_outputs: [], metrics }
    const perField: Record<string, Array<Wire.TensorData>> = {}
    let declared = 0
    for (const [r, record] of msg.lossFnOutputs.entries()) {
      declared += Number(record.numDatums)
      for (const [name, bt] of Object.entries(record.fields)) (perField[name] ??= []).push(...(yield* unbatch(bt, `loss_fn_outputs[${r}].fields.${name}`)))
    }
    const fields = Object.entries(perField)
    const [firstField] = fields
    const n = declared > 0 ? declared : firstField !== undefined ? firstField[1].length : 0
    const outputs: Array<Record<string, Wire.TensorData>> = []
    for (let i = 0; i < n; i++) {
      const datum: Record<string, Wire.TensorData> = {}
      for (const [name, tensors] of fields) {
        const t = tensors[i]
        if (t === undefined) return yield* Result.fail(malformed(`field ${name} has ${tensors.length} datums; the records declare ${n}`))
        datum[name] = t
      }
      outputs.push(datum)
    }
    // the bare class name, as the SDK keeps it
    const type = msg.lossFnOutputType
    return { loss_fn_output_type: type.slice(type.lastIndexOf(":") + 1), loss_fn_outputs: outputs, metrics }
  })

// ---------------------------------------------------------------------------
// SampleResponse

const STOP_TO_PROTO = { stop: Pb.StopReason.STOP, length: Pb.StopReason.LENGTH } as const
const STOP_FROM_PROTO: Partial<Record<Pb.StopReason, "stop" | "length">> = { [Pb.StopReason.STOP]: "stop", [Pb.StopReason.LENGTH]: "length" }

const topkToProto = (rows: NonNullable<SampleResponse["topk_prompt_logprobs"]>): Result.Result<Pb.TopkPromptLogprobs, ProtoError> =>
  Result.gen(function* () {
    const k = Math.max(1, ...rows.map((r) => r?.length ?? 0))
    const ids = new Array<number>(rows.length * k).fill(0)
    const lps = new Array<number>(rows.length * k).fill(MASK_LOGPROB)
    rows.forEach((row, i) =>
      row?.forEach(([token, lp], j) => {
        ids[i * k + j] = token
        lps[i * k + j] = lp
      }),
    )
    return create(Pb.TopkPromptLogprobsSchema, {
      tokenIds: yield* orMalformed(pack(ids, "int32", "topk_prompt_logprobs tokens")),
      logprobs: yield* orMalformed(pack(lps, "float32", "topk_prompt_logprobs")),
      k,
      promptLength: rows.length,
    })
  })

/** @since 0.1.0 @category encoding */
export const sampleToProto = (s: SampleResponse): Result.Result<Pb.SampleResponse, ProtoError> =>
  Result.gen(function* () {
    const sequences: Array<Pb.SampledSequence> = []
    for (const [i, q] of s.sequences.entries()) {
      const tokens = yield* orMalformed(pack(q.tokens, "int32", `sequences[${i}].tokens`))
      const logprobs = q.logprobs === undefined || q.logprobs === null ? {} : { logprobs: yield* orMalformed(pack(q.logprobs, "float32", `sequences[${i}].logprobs`)) }
      sequences.push(create(Pb.SampledSequenceSchema, { stopReason: STOP_TO_PROTO[q.stop_reason], tokens, ...logprobs }))
    }
    const prompt = s.prompt_logprobs === undefined || s.prompt_logprobs === null ? {} : { promptLogprobs: yield* orMalformed(pack(s.prompt_logprobs.map((x) => x ?? Number.NaN), "float32", "prompt_logprobs")) }
    const topk = s.topk_prompt_logprobs === undefined || s.topk_prompt_logprobs === null ? {} : { topkPromptLogprobs: yield* topkToProto(s.topk_prompt_logprobs) }
    const hits = s.prompt_cache_hit_tokens ?? 0
    if (hits < 0 || hits > 2147483647) return yield* Result.fail(malformed(`prompt_cache_hit_tokens is ${hits}; it must be an int32 >= 0`))
    return create(Pb.SampleResponseSchema, { sequences, ...prompt, ...topk, promptCacheHitTokens: hits })
  })

/** Dense top-k matrices -> per position the pairs up to the padding, or null where the row starts padded. */
const topkFromProto = (t: Pb.TopkPromptLogprobs): Result.Result<SampleResponse["topk_prompt_logprobs"], ProtoError> =>
  Result.gen(function* () {
    const n = t.promptLength
    const k = t.k
    if (n === 0 || k === 0) return undefined
    const ids = yield* orMalformed(unpack(t.tokenIds, "int32", "topk_prompt_logprobs.token_ids"))
    const lps = yield* orMalformed(unpack(t.logprobs, "float32", "topk_prompt_logprobs.logprobs"))
    if (ids.length !== n * k || lps.length !== n * k) {
      return yield* Result.fail(malformed(`topk_prompt_logprobs has ${ids.length} token ids and ${lps.length} logprobs for ${n} positions × k ${k}`))
    }
    const padded = (at: number) => ids[at] === 0 && lps[at] === MASK_LOGPROB
    const rows: Array<Array<readonly [number, number]> | null> = []
    for (let i = 0; i < n; i++) {
      const start = i * k
      if (padded(start)) {
        rows.push(null)
        continue
      }
      let end = start + k
      while (end > start && padded(end - 1)) end--
      const row: Array<readonly [number, number]> = []
      // at < end <= n * k, the length of both (checked above)
      for (let at = start; at < end; at++) row.push([ids[at]!, lps[at]!])
      rows.push(row)
    }
    return rows
  })

/** @since 0.1.0 @category decoding */
export const sampleFromProto = (msg: Pb.SampleResponse): Result.Result<SampleResponse, ProtoError> =>
  Result.gen(function* () {
    const sequences: Array<SampleResponse["sequences"][number]> = []
    for (const [i, q] of msg.sequences.entries()) {
      const stop = STOP_FROM_PROTO[q.stopReason]
      if (stop === undefined) return yield* Result.fail(malformed(`sequences[${i}].stop_reason is ${q.stopReason}; expected STOP_REASON_STOP or STOP_REASON_LENGTH`))
      const tokens = yield* orMalformed(unpack(q.tokens, "int32", `sequences[${i}].tokens`))
      const logprobs = q.logprobs === undefined ? {} : { logprobs: yield* orMalformed(unpack(q.logprobs, "float32", `sequences[${i}].logprobs`)) }
      sequences.push({ stop_reason: stop, tokens, ...logprobs })
    }
    const prompt =
      msg.promptLogprobs === undefined
        ? {}
        : { prompt_logprobs: (yield* orMalformed(unpack(msg.promptLogprobs, "float32", "prompt_logprobs"))).map((x) => (Number.isNaN(x) ? null : x)) }
    const topk = msg.topkPromptLogprobs === undefined ? undefined : yield* topkFromProto(msg.topkPromptLogprobs)
    return {
      sequences,
      ...prompt,
      ...(topk !== undefined ? { topk_prompt_logprobs: topk } : {}),
      ...(msg.promptCacheHitTokens !== 0 ? { prompt_cache_hit_tokens: msg.promptCacheHitTokens } : {}),
    }
  })
