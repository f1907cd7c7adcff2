# Sourced by the suites in scripts/test.d: builds (if needed) and names the
# shepherd binary the Rust tests use. `cargo test --no-run` rather than
# `cargo build`: the test build unifies dependency features with the
# dev-dependencies, so a plain `cargo build` would compile many crates a
# second time with other features. After `cargo test` this is a no-op.
cargo test --workspace --locked --no-run --quiet 2>/dev/null ||
    cargo test --workspace --locked --no-run
SHEPHERD_BIN="$PWD/target/debug/shepherd"
export SHEPHERD_BIN
