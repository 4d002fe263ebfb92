/**
 * The ustar writer and reader behind checkpoint archives (`src/backends/http/wire/Tar.ts`):
 * what `pack` writes `unpack` reads back (property), names a ustar header cannot hold are
 * refused, damaged archives are reported, and Python's `tarfile`, with which the
 * official SDK's `tinker checkpoint download` unpacks an archive
 * (`cli/commands/checkpoint.py`), reads the same files (skipped where python3 is not
 * installed).
 */
import { assert, describe, it } from "@effect/vitest"
import * as fc from "fast-check"
import { spawnSync } from "node:child_process"
import { createHash } from "node:crypto"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as Tar from "../../../src/backends/http/wire/Tar.ts"

const packed = (files: ReadonlyArray<Tar.TarFile>, mtime = 0): Uint8Array => {
  const out = Tar.pack(files, mtime)
  if (typeof out === "string") return assert.fail(out)
  return out
}

/** A plain relative name of 1 to 100 bytes: segments of letters, digits, `._-`, none of them `..`. */
const name = fc
  .array(fc.stringMatching(/^[A-Za-z0-9_-][A-Za-z0-9._-]{0,15}$/), { minLength: 1, maxLength: 4 })
  .map((parts) => parts.join("/"))
  .filter((n) => n.length <= 100 && !n.split("/").includes(".."))

const files = fc.uniqueArray(fc.record({ name, bytes: fc.uint8Array({ maxLength: 1500 }) }), { selector: (f) => f.name, maxLength: 5 })

describe("tar archives", () => {
  it("what pack writes unpack reads back, in 512-byte blocks ending in two zero blocks (property)", () =>
    fc.assert(
      fc.property(files, fc.integer({ min: 0, max: 2 ** 33 - 1 }), (given, mtime) => {
        const tar = packed(given, mtime)
        assert.strictEqual(tar.length % 512, 0)
        assert.strictEqual(tar.length, 1024 + given.reduce((s, f) => s + 512 + Math.ceil(f.bytes.length / 512) * 512, 0))
        assert.isTrue(tar.subarray(tar.length - 1024).every((b) => b === 0))
        assert.deepStrictEqual(Tar.unpack(tar), given.map((f) => ({ name: f.name, bytes: Uint8Array.from(f.bytes) })))
      }),
      { numRuns: 150 },
    ))

  it("each header's checksum is the sum of its bytes with the checksum field as spaces", () => {
    const tar = packed([{ name: "adapter_config.json", bytes: new TextEncoder().encode("{}\n") }], 1_700_000_000)
    const header = Uint8Array.from(tar.subarray(0, 512))
    const stored = Number.parseInt(new TextDecoder().decode(header.subarray(148, 156)).replace(/[\0 ]/g, ""), 8)
    header.fill(0x20, 148, 156)
    assert.strictEqual(stored, header.reduce((s, b) => s + b, 0))
    assert.strictEqual(new TextDecoder().decode(header.subarray(257, 263)), "ustar\0")
    assert.strictEqual(Number.parseInt(new TextDecoder().decode(header.subarray(136, 147)), 8), 1_700_000_000)
  })

  it("refuses names a ustar header cannot hold: over 100 bytes, empty, absolute, with ..", () => {
    const bytes = new Uint8Array([1])
    assert.isTrue(Tar.pack([{ name: "a".repeat(100), bytes }]) instanceof Uint8Array)
    for (const bad of ["a".repeat(101), "é".repeat(51), "", "/etc/passwd", "../up", "a/../b"]) {
      const out = Tar.pack([{ name: "ok", bytes }, { name: bad, bytes }])
      assert.isString(out, JSON.stringify(bad))
      assert.include(out as string, `the file name ${JSON.stringify(bad)} cannot be archived`)
    }
  })

  it("reports an archive cut short or without its end blocks", () => {
    const tar = packed([{ name: "state.ckpt", bytes: new Uint8Array(700).fill(7) }])
    assert.match(Tar.unpack(tar.subarray(0, 512 + 100)) as string, /"state\.ckpt" runs past the end of the archive/)
    assert.match(Tar.unpack(tar.subarray(0, 512 + 1024)) as string, /ends without its end blocks after 1 files/)
    const badSize = Uint8Array.from(tar)
    badSize.set(new TextEncoder().encode("zzzzzzzzzzz\0"), 124)
    assert.match(Tar.unpack(badSize) as string, /has no valid size/)
  })

  const python = spawnSync("python3", ["-c", "import tarfile"], { encoding: "utf8" })
  const why = python.error !== undefined ? `python3 cannot run (${python.error.message})` : python.status !== 0 ? `python3 has no tarfile: ${python.stderr.trim()}` : undefined
  if (why !== undefined) console.log(`skipping the check with Python's tarfile: ${why}`)

  it.skipIf(why !== undefined)("Python's tarfile (what the SDK's checkpoint download unpacks with) lists and reads the files", () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "gyre-tar-"))
    const archive = path.join(dir, "ck.tar")
    const content: ReadonlyArray<Tar.TarFile> = [
      { name: "adapter_config.json", bytes: new TextEncoder().encode('{"r": 4}\n') },
      { name: "adapter_model.safetensors", bytes: new Uint8Array(1025).map((_, i) => i % 251) },
      { name: "checkpoint_complete", bytes: new Uint8Array(0) },
      { name: "gyre-state.ckpt", bytes: new Uint8Array(512).fill(3) },
    ]
    fs.writeFileSync(archive, packed(content, 1_700_000_000))
    // strict reading: errorlevel 2 raises on any problem; the "data" filter is what extractall applies in recent Pythons
    const script = [
      "import hashlib, json, sys, tarfile",
      "with tarfile.open(sys.argv[1], errorlevel=2) as t:",
      "    members = t.getmembers()",
      "    print(json.dumps([[m.name, m.size, m.isfile(), m.mtime, oct(m.mode), hashlib.sha256(t.extractfile(m).read()).hexdigest()] for m in members]))",
      "    t.extractall(sys.argv[2], **({'filter': 'data'} if hasattr(tarfile, 'data_filter') else {}))",
    ].join("\n")
    const out = spawnSync("python3", ["-c", script, archive, path.join(dir, "out")], { encoding: "utf8" })
    assert.strictEqual(out.status, 0, out.stderr)
    const listed = JSON.parse(out.stdout) as Array<[string, number, boolean, number, string, string]>
    const sha = (b: Uint8Array) => createHash("sha256").update(b).digest("hex")
    assert.deepStrictEqual(
      listed,
      content.map((f) => [f.name, f.bytes.length, true, 1_700_000_000, "0o644", sha(f.bytes)]),
    )
    for (const f of content) assert.deepStrictEqual(new Uint8Array(fs.readFileSync(path.join(dir, "out", f.name))), f.bytes)
  })
})
