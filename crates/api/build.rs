//! Rebuilds this crate when the committed web bundle changes: the bundle is
//! compiled in with `include_dir!`, which cannot tell Cargo what it read.

fn main() {
    println!("cargo:rerun-if-changed=../../web/dist");
}
