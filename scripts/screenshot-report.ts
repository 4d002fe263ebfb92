/**
 * Renders a run's report.html in headless Chromium and saves a PNG screenshot, to check
 * that the page draws with no network:
 *
 *   npx tsx scripts/screenshot-report.ts runs/<name> [out.png]
 *
 * Needs Debian's chromium (`apt-get install chromium`), or CHROMIUM=/path/to/chrome.
 */
import { execFileSync } from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"

const [dir, out = Path.join(dir ?? ".", "report.png")] = process.argv.slice(2)
if (dir === undefined) {
  console.error("usage: npx tsx scripts/screenshot-report.ts runs/<name> [out.png]")
  process.exit(2)
}
const page = Path.resolve(dir, "report.html")
if (!Fs.existsSync(page)) {
  console.error(`${page} not found: run \`npx tsx report ${dir}\` first`)
  process.exit(1)
}
const chromium = process.env["CHROMIUM"] ?? "/usr/bin/chromium"
if (!Fs.existsSync(chromium)) {
  console.error(`${chromium} not found: install Debian's chromium package or set CHROMIUM`)
  process.exit(1)
}
const profile = Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-chromium-"))
execFileSync(chromium, [
  "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
  "--disable-background-networking", "--disable-component-update", "--disable-sync",
  `--user-data-dir=${profile}`, "--hide-scrollbars", "--window-size=1440,1400",
  `--screenshot=${Path.resolve(out)}`, `file://${page}`,
], { stdio: "ignore", timeout: 60_000 })
const size = Fs.statSync(out).size
console.log(`wrote ${out} (${size} bytes)`)
