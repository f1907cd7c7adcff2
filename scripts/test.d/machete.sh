#!/usr/bin/env bash
# Unused dependencies: cargo-machete reads every crate's sources and fails
# on a dependency none of them names. It uses a cargo-machete on PATH, else
# installs the pinned version once into .ci/tools (about a minute on two
# cores; cached across runs like .ci/venv), then takes a few seconds.
# A dependency named only where machete cannot see it is listed, with the
# reason, under [package.metadata.cargo-machete] in its crate's Cargo.toml.
set -euo pipefail
cd "$(dirname "$0")/../.."

version=0.9.2
tools=.ci/tools
bin=$(command -v cargo-machete || true)
if [ -z "$bin" ]; then
    bin=$tools/bin/cargo-machete
    if [ ! -x "$bin" ] || [ "$("$bin" --version)" != "$version" ]; then
        started=$SECONDS
        cargo install cargo-machete --version "$version" --locked --root "$tools" --quiet
        echo "installed cargo-machete $version in $((SECONDS - started)) s"
    fi
fi
"$bin"
