#!/usr/bin/env bash
# Runs the official Tinker Python SDK, unmodified, against a fresh `gyre serve`.
#
#   scripts/sdk/check.sh <sdk-folder> [check.py flags...]
#
# <sdk-folder> is a checkout of the SDK's public repository (its src/ goes on PYTHONPATH
# as is). PYTHON (default python3) must have the SDK's dependencies: httpx[http2],
# pydantic>=2, anyio, distro, sniffio, numpy, protobuf, rich, click, orjson, zstandard,
# typing-extensions. SDK_VERSION (default: read from the SDK's pyproject.toml) is what the
# SDK reports as its own version. Flags after the folder go to scripts/sdk/check.py
# (--steps, --lr, --skip-rl, ...). SERVE_FLAGS adds flags to `serve`.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
sdk="${1:?usage: scripts/sdk/check.sh <sdk-folder> [check.py flags...]}"
shift
[ -d "$sdk/src/tinker" ] || { echo "error: $sdk/src/tinker is not there: pass the SDK repository's folder" >&2; exit 2; }
python="${PYTHON:-python3}"
version="${SDK_VERSION:-$(sed -n 's/^version = "\(.*\)"/\1/p' "$sdk/pyproject.toml" | head -1)}"
work="$(mktemp -d)"
trap 'kill "$serve_pid" 2>/dev/null || true; wait "$serve_pid" 2>/dev/null || true; rm -rf "$work"' EXIT
# the SDK reads its version from installed package metadata
mkdir -p "$work/meta/tinker-$version.dist-info"
printf 'Metadata-Version: 2.1\nName: tinker\nVersion: %s\n' "$version" > "$work/meta/tinker-$version.dist-info/METADATA"
mkdir -p "$work/state"
(cd "$root" && exec node --import tsx serve.ts --port 0 --state-dir "$work/state" ${SERVE_FLAGS:-}) > "$work/serve.log" 2>&1 &
serve_pid=$!
url=""
for _ in $(seq 1 300); do
  url="$(grep -o 'http://127.0.0.1:[0-9]*' "$work/serve.log" | head -1 || true)"
  [ -n "$url" ] && break
  kill -0 "$serve_pid" 2>/dev/null || { cat "$work/serve.log" >&2; echo "error: serve exited before it listened" >&2; exit 1; }
  sleep 0.1
done
[ -n "$url" ] || { cat "$work/serve.log" >&2; echo "error: serve did not start within 30 s" >&2; exit 1; }
echo "serve at $url (log: $work/serve.log), SDK $version from $sdk"
status=0
PYTHONPATH="$sdk/src:$work/meta${PYTHONPATH:+:$PYTHONPATH}" TINKER_API_KEY="${TINKER_API_KEY:-tml-gyre-local}" \
  "$python" "$here/check.py" --url "$url" "$@" || status=$?
if [ "$status" -ne 0 ] && [ -n "${SHOW_SERVE_LOG:-}" ]; then tail -50 "$work/serve.log"; fi
exit "$status"
