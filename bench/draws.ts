/**
 * What drawing problems costs on a big data set: a generated JSONL of about 100 MB
 * (142,815 GSM8K-like rows, padded), drawn the way gyre draws now (an index of each
 * split built in one streamed pass, each epoch's order kept, rows read by number) and
 * the way it drew before (every draw re-decoded the split, re-hashed every row and
 * re-shuffled the pool; the old algorithm is kept here to compare side by side).
 * Prints the time to the first problem and the time of one step's draws at 2 and 64
 * groups, for both, and the first problem of a second env over the same file, which reads
 * the index kept on disk by the first (in a cache folder of this run, so the first always
 * scans). Run: npm run bench:draws  (--rows N for a smaller file, --old-groups N)
 */
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { Effect, Schema } from "effect"
import { Env, Reward } from "gyre"

const arg = (name: string, fallback: number) => {
  const at = process.argv.indexOf(`--${name}`)
  return at > 0 ? Number(process.argv[at + 1]) : fallback
}
const ROWS = arg("rows", 142_815)
const OLD_GROUPS = arg("old-groups", 8)

const Problem = Schema.Struct({ question: Schema.String, answer: Schema.String })
type Problem = typeof Problem.Type
const reward = Reward.make<Problem>("exact", (r) => (r.completion.includes(r.problem.answer) ? 1 : 0))
const envOf = (source: Env.Source<Problem>) => Env.make({ name: "bench-draws", problem: Problem, source, prompt: (p) => p.question, reward })

// ===== the data =====
const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-bench-draws-"))
process.on("exit", () => Fs.rmSync(dir, { recursive: true, force: true }))
// the kept row index goes to a folder of this run, so the first draw below always scans
process.env["GYRE_CACHE"] = Path.join(dir, "cache")
const file = Path.join(dir, "rows.jsonl")
{
  const pad = "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. ".repeat(4)
  const out = Fs.openSync(file, "w")
  let lines: Array<string> = []
  for (let i = 0; i < ROWS; i++) {
    lines.push(JSON.stringify({ question: `Problem ${i}: ${pad}How many clips did she sell altogether?`, answer: `${pad.slice(0, 230)} #### ${i * 3 + 72}`, id: i }))
    if (lines.length === 10_000) {
      Fs.writeSync(out, lines.join("\n") + "\n")
      lines = []
    }
  }
  Fs.writeSync(out, lines.join("\n") + "\n")
  Fs.closeSync(out)
}
const mb = (Fs.statSync(file).size / 1024 / 1024).toFixed(0)
console.log(`data: ${ROWS} rows, ${mb} MB of JSONL`)

// ===== the draws before: the old algorithm, kept to compare =====
const env = envOf(Env.jsonl(file))
const oldLoad = () => {
  const decode = Schema.decodeUnknownSync(Problem)
  return Fs.readFileSync(file, "utf8").split("\n").filter((l) => l.trim() !== "").map((l) => decode(JSON.parse(l)))
}
let oldRows: Array<Problem> | undefined
const oldProblemAt = (seed: number, index: number, split: Env.Split): Problem => {
  const all = (oldRows ??= oldLoad())
  const pool = all.filter((p) => Env.splitOf(env, p) === split)
  const rng = Env.random(`${env.name}/${split}/${seed}/epoch${Math.floor(index / pool.length)}`)
  const order = [...pool]
  for (let i = order.length - 1; i > 0; i--) {
    const j = Math.floor(rng.next() * (i + 1))
    ;[order[i], order[j]] = [order[j]!, order[i]!]
  }
  return order[index % order.length]!
}

const seconds = (t0: number) => (performance.now() - t0) / 1000
const step = (groups: number, first: number, draw: (index: number) => Promise<unknown>) =>
  (async () => {
    const t0 = performance.now()
    for (let g = 0; g < groups; g++) await draw(first + g)
    return seconds(t0)
  })()

const newDraw = (index: number) => Effect.runPromise(Env.problemAt(env, { seed: 0, index, split: "train" }))
// CPU time beside wall time: on a shared machine the wall time of the one pass depends on the load
const cpu = (start: NodeJS.CpuUsage) => {
  const used = process.cpuUsage(start)
  return (used.user + used.system) / 1e6
}
let t0 = performance.now()
let c0 = process.cpuUsage()
const firstNew = await newDraw(0)
const newFirst = seconds(t0)
const newFirstCpu = cpu(c0)
// the next run: a new env over the same file (same name and Schema) finds the index kept on disk
const again = envOf(Env.jsonl(file))
t0 = performance.now()
c0 = process.cpuUsage()
const firstAgain = await Effect.runPromise(Env.problemAt(again, { seed: 0, index: 0, split: "train" }))
const keptFirst = seconds(t0)
const keptFirstCpu = cpu(c0)
if (JSON.stringify(firstAgain.problem) !== JSON.stringify(firstNew.problem)) throw new Error("the kept index draws another first problem")
const new2 = await step(2, 1000, newDraw)
const new64 = await step(64, 2000, newDraw)
const heapMb = (process.memoryUsage().heapUsed / 1024 / 1024).toFixed(0)

t0 = performance.now()
c0 = process.cpuUsage()
const firstOld = oldProblemAt(0, 0, "train")
const oldFirst = seconds(t0)
const oldFirstCpu = cpu(c0)
const oldDraw = (index: number) => Promise.resolve(oldProblemAt(0, index, "train"))
const old2 = await step(2, 1000, oldDraw)
const oldSome = await step(OLD_GROUPS, 2000, oldDraw)
const old64 = (oldSome / OLD_GROUPS) * 64

if (JSON.stringify(firstNew.problem) !== JSON.stringify(firstOld)) throw new Error("the first problem differs between the old and the new draws")
for (const index of [1, 1000, 2001, 130_000]) {
  const a = (await newDraw(index)).problem
  if (JSON.stringify(a) !== JSON.stringify(oldProblemAt(0, index, "train"))) throw new Error(`problem ${index} differs between the old and the new draws`)
}
console.log(`same problems drawn both ways (checked indexes 0, 1, 1000, 2001, 130000)`)
console.log(`                      first problem (CPU)    2-group step   64-group step`)
console.log(`before (old draws)    ${oldFirst.toFixed(2).padStart(7)} s (${oldFirstCpu.toFixed(2)} s)   ${old2.toFixed(2).padStart(10)} s   ${old64.toFixed(1).padStart(11)} s (${OLD_GROUPS} draws timed, x${64 / OLD_GROUPS})`)
console.log(`now (row index)       ${newFirst.toFixed(2).padStart(7)} s (${newFirstCpu.toFixed(2)} s)   ${(new2 * 1000).toFixed(2).padStart(9)} ms   ${(new64 * 1000).toFixed(2).padStart(10)} ms`)
console.log(`now, index kept       ${keptFirst.toFixed(2).padStart(7)} s (${keptFirstCpu.toFixed(2)} s)   (the next run on the same file)`)
console.log(`load average: ${Os.loadavg().map((l) => l.toFixed(1)).join(", ")} on ${Os.availableParallelism()} cores`)
console.log(`heap after the index and the draws: ${heapMb} MB`)
