#!/usr/bin/env bash
# Installs OpenAI's official Node.js client library (npm "openai", pinned)
# from the npm registry into .cache once, and prints the folder it is in.
# serve's TestOpenAIClient runs serve/testdata/openai-client.cjs with it
# against a goray serve app. 6.x is the newest line that runs on Node 20
# (7.x asks for Node 22 or later).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
version=6.49.0
prefix="$repo/.cache/openai-node-$version"
if [ ! -f "$prefix/node_modules/openai/package.json" ]; then
	mkdir -p "$prefix"
	npm install --silent --no-audit --no-fund --prefix "$prefix" "openai@$version" >&2
fi
echo "$prefix"
