//! Pieces shared by the benches that start the real `shepherd` binary as a
//! separate process (`sse`, `load`).

use std::path::PathBuf;

/// `SHEPHERD_BENCH_BIN`, else the `shepherd` binary of this bench's own
/// profile directory (`<target>/release/deps/<bench>-…` →
/// `<target>/release/shepherd`, which Cargo builds for a bench).
pub fn server_binary() -> Option<PathBuf> {
    if let Some(bin) = std::env::var_os("SHEPHERD_BENCH_BIN").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(bin));
    }
    let exe = std::env::current_exe().ok()?;
    let bin = exe.parent()?.parent()?.join("shepherd");
    bin.is_file().then_some(bin)
}

/// Raises the soft open-files limit (inherited by the server) to at least
/// `want`, as far as the hard limit allows; returns the limit in force.
pub fn raise_nofile(want: libc::rlim_t) -> libc::rlim_t {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid, owned struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) != 0 {
            return 0;
        }
        if r.rlim_cur < want {
            r.rlim_cur = if r.rlim_max == libc::RLIM_INFINITY {
                want
            } else {
                want.min(r.rlim_max)
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &r) != 0 {
                libc::getrlimit(libc::RLIMIT_NOFILE, &mut r);
            }
        }
    }
    r.rlim_cur
}
