#!/usr/bin/env bash
# The web UI's suite: installs the locked npm packages, lints the UI (ESLint,
# with the boundaries between its folders), rebuilds the bundle and fails if
# it differs from the committed web/dist (the binary embeds that one; `cargo
# build` never runs Node), checks the initial JavaScript budget, then runs the
# browser tests in Debian's Chromium against the real server; they also fail
# if web/src/api/schema.d.ts is not what the server's /api/openapi.json
# generates.
set -euo pipefail
cd "$(dirname "$0")/../.."

if ! command -v chromium >/dev/null 2>&1; then
    echo "installing Debian's chromium"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium fonts-dejavu-core >/dev/null
fi

cd web
npm ci --no-audit --no-fund --loglevel=error
npm run lint --silent
npm run build --silent
if [ -n "$(git status --porcelain -- dist)" ]; then
    echo "web/dist differs from a fresh build of web/: run 'npm run build' in web/ and commit web/dist" >&2
    git status --porcelain -- dist >&2
    exit 1
fi
node scripts/check-size.mjs
cd ..

# The single sign-on tests' OpenID provider (tests/oidc) has its own locked packages.
(cd tests/oidc && npm ci --no-audit --no-fund --loglevel=error)

# The binary the tests drive (the one the Rust tests built), embedding the
# bundle just checked.
source scripts/binary.sh
cd web
npm run e2e --silent
