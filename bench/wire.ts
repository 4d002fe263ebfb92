/**
 * Bytes on the wire and encode + decode time of one large `forward_backward`, JSON vs
 * protobuf (vs protobuf + zstd), measured side by side in one run:
 *
 *   npx tsx bench/wire.ts [--reps N] [--datums N] [--tokens N] [--python PATH] [--ppo-shaped]
 *
 * The request is a ppo `forward_backward` of `datums` x `tokens` (target_tokens int64,
 * logprobs and advantages float32; seeded random tokens below 99 and random float32
 * values; with `--ppo-shaped`, a 64-token prompt with 0.0 logprobs and advantages, and one
 * advantage per datum over its completion, as an RL loop sends them). Both sides of each encoding are timed as gyre runs them:
 * - JSON: `JSON.stringify` + UTF-8 (the client's body); UTF-8 decode + `JSON.parse` +
 *   the `Wire.ForwardBackwardRequest` Schema decode (the server's `decodeOr400`).
 * - protobuf: `Proto.forwardBackwardRequestBytes`; `Proto.decodeForwardBackwardRequest`
 *   + the same Schema decode (the server checks the decoded body as a JSON body).
 * - protobuf + zstd: compressed as the official SDK does (`zstandard`, default level 3)
 *   in a Python child process (no zstd encoder on Node 20), whose compression time is
 *   its own median; decompression is `Proto.decompressZstd` inside the decode.
 * The result direction is a `ForwardBackwardOutput` of `datums` x `tokens` float32
 * logprobs, JSON (decoded with `Wire.ForwardBackwardOutput`) vs protobuf. Repetitions
 * are interleaved; the first `reps / 5` are warm-up. Prints medians and ratios; asserts
 * nothing. The idempotency hash of the body (both ways) is left out.
 */
import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { Effect, Result } from "effect"
import * as Proto from "../src/backends/http/wire/Proto.ts"
import { decodeOr400 } from "../src/backends/http/server/Requests.ts"
import * as Wire from "../src/backends/http/wire/Wire.ts"

const args = process.argv.slice(2)
const flag = (name: string, fallback: number) => {
  const i = args.indexOf(`--${name}`)
  const v = i >= 0 ? Number(args[i + 1]) : Number.NaN
  return Number.isFinite(v) && v > 0 ? v : fallback
}
const REPS = flag("reps", 30)
const WARMUP = Math.max(1, Math.floor(REPS / 5))
const DATUMS = flag("datums", 64)
const TOKENS = flag("tokens", 1024)
const SHAPED = args.includes("--ppo-shaped")
const PROMPT = Math.min(64, TOKENS)
const PYTHON = args.includes("--python") ? args[args.indexOf("--python") + 1]! : (process.env["PYTHON"] ?? "/work/V/bin/python")

const median = (xs: ReadonlyArray<number>) => {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.floor(s.length / 2)]!
}
/** mulberry32: a seeded uniform [0, 1) */
const rng = (seed: number) => () => {
  seed = (seed + 0x6d2b79f5) | 0
  let t = Math.imul(seed ^ (seed >>> 15), 1 | seed)
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296
}
const rand = rng(14)
const ints = (n: number) => Array.from({ length: n }, () => Math.floor(rand() * 99))
const floats = (n: number, scale: number, offset: number) => Array.from({ length: n }, () => Math.fround(offset + scale * rand()))
const tensor = (data: Array<number>, dtype: "int64" | "float32"): Wire.TensorData => ({ data, dtype, shape: [data.length] })

const request: Proto.ForwardBackwardRequest = {
  model_id: "model-0",
  seq_id: 7,
  forward_only: false,
  forward_backward_input: {
    loss_fn: "ppo",
    data: Array.from({ length: DATUMS }, () => ({
      model_input: { chunks: [{ type: "encoded_text" as const, tokens: ints(TOKENS) }] },
      loss_fn_inputs: {
        target_tokens: tensor(ints(TOKENS), "int64"),
        logprobs: tensor(SHAPED ? [...Array(PROMPT).fill(0), ...floats(TOKENS - PROMPT, -8, 0)] : floats(TOKENS, -8, 0), "float32"),
        advantages: tensor(SHAPED ? [...Array(PROMPT).fill(0), ...Array(TOKENS - PROMPT).fill(floats(1, 4, -2)[0])] : floats(TOKENS, 4, -2), "float32"),
      },
    })),
  },
}
const { forward_only: _, ...jsonRequest } = request
const output: Wire.ForwardBackwardOutput = {
  loss_fn_output_type: "ArrayRecord",
  loss_fn_outputs: Array.from({ length: DATUMS }, () => ({ logprobs: tensor(floats(TOKENS, -8, 0), "float32") })),
  metrics: { "loss:sum": 123.456, "active_tokens:sum": DATUMS * TOKENS },
}

const utf8 = new TextEncoder()
const fromUtf8 = new TextDecoder()
const checkRequest = decodeOr400(Wire.ForwardBackwardRequest)
const checkOutput = decodeOr400(Wire.ForwardBackwardOutput)
const run = <A>(e: Effect.Effect<A, unknown>) => Effect.runSync(e)
const protoBytes = (req: Proto.ForwardBackwardRequest) => Result.getOrThrow(Proto.forwardBackwardRequestBytes(req))
const decodeProtoRequest = (bytes: Uint8Array, encoding?: string) =>
  run(Effect.flatMap(Proto.decodeForwardBackwardRequest(bytes, encoding), ({ forward_only: _, ...body }) => checkRequest(body)))

/** zstd level 3 as the SDK's `zstandard.ZstdCompressor()`: the bytes and the median compression ms, or why not. */
const zstdViaPython = (bytes: Uint8Array): { bytes: Uint8Array; ms: number } | string => {
  if (!fs.existsSync(PYTHON)) return `no Python at ${PYTHON} (pass --python or PYTHON)`
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "gyre-bench-wire-"))
  try {
    fs.writeFileSync(path.join(dir, "in"), bytes)
    const script = [
      "import sys, time, statistics, zstandard",
      "raw = open(sys.argv[1] + '/in', 'rb').read(); out = b''; ts = []",
      `for i in range(${REPS + WARMUP}):`,
      "    t = time.perf_counter(); out = zstandard.ZstdCompressor().compress(raw); ts.append(time.perf_counter() - t)",
      `open(sys.argv[1] + '/out', 'wb').write(out); print(statistics.median(ts[${WARMUP}:]) * 1000)`,
    ].join("\n")
    const r = spawnSync(PYTHON, ["-c", script, dir], { encoding: "utf8" })
    if (r.status !== 0) return `${PYTHON} could not compress: ${(r.stderr || r.error?.message || "").trim().split("\n").pop()}`
    return { bytes: new Uint8Array(fs.readFileSync(path.join(dir, "out"))), ms: Number(r.stdout.trim()) }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true })
  }
}

interface Variant {
  readonly name: string
  /** one encode; returns the wire bytes */
  readonly encode: () => Uint8Array
  /** one decode of the bytes `encode` returned */
  readonly decode: (bytes: Uint8Array) => unknown
  /** extra encode time measured elsewhere (ms) */
  readonly extraEncodeMs?: number
}

const zstd = zstdViaPython(protoBytes(request))
const requestVariants: Array<Variant> = [
  { name: "JSON", encode: () => utf8.encode(JSON.stringify(jsonRequest)), decode: (b) => run(checkRequest(JSON.parse(fromUtf8.decode(b)))) },
  { name: "protobuf", encode: () => protoBytes(request), decode: (b) => decodeProtoRequest(b) },
]
if (typeof zstd !== "string") {
  requestVariants.push({ name: "protobuf + zstd", encode: () => (protoBytes(request), zstd.bytes), decode: (b) => decodeProtoRequest(b, "zstd"), extraEncodeMs: zstd.ms })
}
const outputVariants: Array<Variant> = [
  { name: "JSON", encode: () => utf8.encode(JSON.stringify(output)), decode: (b) => run(checkOutput(JSON.parse(fromUtf8.decode(b)))) },
  { name: "protobuf", encode: () => run(Proto.encodeForwardBackwardOutput(output)), decode: (b) => run(Effect.flatMap(Proto.decodeForwardBackwardOutput(b), checkOutput)) },
]

interface Measured {
  bytes: number
  encode: Array<number>
  decode: Array<number>
}

const measure = (variants: ReadonlyArray<Variant>): Array<Measured> => {
  const out = variants.map((): Measured => ({ bytes: 0, encode: [], decode: [] }))
  for (let rep = 0; rep < REPS + WARMUP; rep++) {
    // rotate the order so that no variant always runs right after the same one
    for (let j = 0; j < variants.length; j++) {
      const k = (rep + j) % variants.length
      const v = variants[k]!
      const t0 = performance.now()
      const bytes = v.encode()
      const t1 = performance.now()
      v.decode(bytes)
      const t2 = performance.now()
      out[k]!.bytes = bytes.byteLength
      if (rep >= WARMUP) {
        out[k]!.encode.push(t1 - t0 + (v.extraEncodeMs ?? 0))
        out[k]!.decode.push(t2 - t1)
      }
    }
  }
  return out
}

const report = (title: string, variants: ReadonlyArray<Variant>, m: ReadonlyArray<Measured>) => {
  console.log(`\n${title}`)
  console.log(`${"".padEnd(18)}${"bytes".padStart(12)}${"size ratio".padStart(12)}${"encode ms".padStart(11)}${"decode ms".padStart(11)}${"enc+dec ms".padStart(12)}${"time ratio".padStart(12)}`)
  const base = m[0]!
  const total = (x: Measured) => median(x.encode.map((e, i) => e + x.decode[i]!))
  for (let k = 0; k < variants.length; k++) {
    const x = m[k]!
    console.log(
      `${variants[k]!.name.padEnd(18)}${String(x.bytes).padStart(12)}${`x${(x.bytes / base.bytes).toFixed(3)}`.padStart(12)}` +
        `${median(x.encode).toFixed(1).padStart(11)}${median(x.decode).toFixed(1).padStart(11)}${total(x).toFixed(1).padStart(12)}${`x${(total(x) / total(base)).toFixed(3)}`.padStart(12)}`,
    )
  }
}

console.log(`bench/wire: ${DATUMS} datums x ${TOKENS} tokens, ppo${SHAPED ? " (ppo-shaped floats)" : " (random floats)"}; median of ${REPS} interleaved repetitions after ${WARMUP} warm-up; load ${os.loadavg().map((l) => l.toFixed(2)).join(" ")} on ${os.cpus().length} cores`)
const parsed = JSON.parse(JSON.stringify(jsonRequest)) as unknown
const schemaOnly: Variant = { name: "Schema decode", encode: () => new Uint8Array(0), decode: () => run(checkRequest(parsed)) }
const [req, res] = [measure([...requestVariants, schemaOnly]), measure(outputVariants)]
report("forward_backward request (client encodes, server decodes)", requestVariants, req)
console.log(`  (of each decode, the Wire.ForwardBackwardRequest Schema decode of the parsed body takes ${median(req[requestVariants.length]!.decode).toFixed(1)} ms)`)
if (typeof zstd === "string") console.log(`protobuf + zstd: skipped, ${zstd}`)
else console.log(`  (protobuf + zstd encode = protobuf encode + ${zstd.ms.toFixed(1)} ms median zstd level-3 compression in Python's zstandard, timed there)`)
report("ForwardBackwardOutput result (server encodes, client decodes)", outputVariants, res)
const raw = DATUMS * TOKENS * (8 + 4 + 4 + 4)
console.log(
  `\nWire sizes: the request's raw payload is ${raw} bytes (tokens as int32 and target_tokens as int64, 4-byte floats); ` +
    `protobuf carries it in x${(req[1]!.bytes / raw).toFixed(3)} of that, JSON in x${(req[0]!.bytes / raw).toFixed(3)}` +
    (typeof zstd === "string" ? "." : `, protobuf + zstd in x${(zstd.bytes.byteLength / raw).toFixed(3)}.`) +
    (SHAPED ? "" : " Random floats are the worst case for zstd; --ppo-shaped sends them as an RL loop does."),
)
