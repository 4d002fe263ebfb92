/**
 * A minimal tar writer and reader (POSIX ustar, regular files only), for checkpoint
 * archives: the official SDK's `tinker checkpoint download` unpacks the archive route's
 * file with Python's `tarfile` and expects PEFT adapter files at its top level.
 *
 * Each file is a 512-byte header (name, mode 0644, size and mtime in octal, the header's
 * checksum) followed by its bytes padded to 512; two zero blocks end the archive.
 *
 * @since 0.1.0
 */

/** A file in an archive. @since 0.1.0 @category models */
export interface TarFile {
  /** a plain relative name, at most 100 bytes */
  readonly name: string
  readonly bytes: Uint8Array
}

const BLOCK = 512

const octal = (n: number, width: number): string => n.toString(8).padStart(width - 1, "0") + "\0"

const header = (name: string, size: number, mtime: number): Uint8Array => {
  const h = new Uint8Array(BLOCK)
  const put = (text: string, at: number) => h.set(new TextEncoder().encode(text), at)
  put(name, 0)
  put(octal(0o644, 8), 100)
  put(octal(0, 8), 108)
  put(octal(0, 8), 116)
  put(octal(size, 12), 124)
  put(octal(mtime, 12), 136)
  put("        ", 148) // the checksum field counts as spaces while summing
  put("0", 156) // a regular file
  put("ustar\0", 257)
  put("00", 263)
  let sum = 0
  for (const b of h) sum += b
  put(octal(sum, 7) + " ", 148)
  return h
}

/**
 * The archive of `files`, or a message naming a file whose name cannot go in a ustar
 * header (empty, absolute, with `..`, or over 100 bytes).
 * @since 0.1.0 @category constructors
 */
export const pack = (files: ReadonlyArray<TarFile>, mtimeSeconds = 0): Uint8Array | string => {
  for (const f of files) {
    const bytes = new TextEncoder().encode(f.name).length
    if (f.name === "" || f.name.startsWith("/") || f.name.split("/").includes("..") || bytes > 100) return `tar: the file name ${JSON.stringify(f.name)} cannot be archived`
  }
  const size = files.reduce((s, f) => s + BLOCK + Math.ceil(f.bytes.length / BLOCK) * BLOCK, 2 * BLOCK)
  const out = new Uint8Array(size)
  let at = 0
  for (const f of files) {
    out.set(header(f.name, f.bytes.length, Math.floor(mtimeSeconds)), at)
    at += BLOCK
    out.set(f.bytes, at)
    at += Math.ceil(f.bytes.length / BLOCK) * BLOCK
  }
  return out
}

/**
 * The regular files of a ustar archive (what `pack` writes), or a message saying where
 * it is not one.
 * @since 0.1.0 @category destructors
 */
export const unpack = (archive: Uint8Array): Array<TarFile> | string => {
  const files: Array<TarFile> = []
  const text = (from: number, len: number) => new TextDecoder().decode(archive.subarray(from, from + len)).replace(/\0.*$/s, "")
  let at = 0
  while (at + BLOCK <= archive.length) {
    const h = archive.subarray(at, at + BLOCK)
    if (h.every((b) => b === 0)) return files
    const size = Number.parseInt(text(at + 124, 12).trim(), 8)
    if (!Number.isFinite(size) || size < 0) return `tar: the header at byte ${at} has no valid size`
    const name = text(at, 100)
    const type = text(at + 156, 1)
    if (at + BLOCK + size > archive.length) return `tar: ${JSON.stringify(name)} runs past the end of the archive`
    if (type === "0" || type === "") files.push({ name, bytes: archive.slice(at + BLOCK, at + BLOCK + size) })
    at += BLOCK + Math.ceil(size / BLOCK) * BLOCK
  }
  return `tar: the archive ends without its end blocks after ${files.length} files`
}
