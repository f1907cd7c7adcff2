//! What the server-side processes do so that another process of the same
//! user cannot read Shepherd's secrets out of them.
//!
//! An agent runs as the user that runs `shepherd serve`, and by default a
//! process may read every file under `/proc/<pid>/` of its user's other
//! processes: `environ` (the operator token and the other secret settings
//! given at start), `mem`, `fd`. So the server, the runner and every shim
//! mark themselves not dumpable (`PR_SET_DUMPABLE` 0), which gives those
//! files to root and refuses ptrace to anyone without `CAP_SYS_PTRACE`; an
//! exec of an ordinary program makes the new program dumpable again, so an
//! agent under a shim is as debuggable as ever.
//!
//! They also take the secret settings ([`shepherd_core::secrets::SECRET_ENV`])
//! out of their environment once they have read them: out of what a child
//! would inherit, and out of the block `/proc/<pid>/environ` shows, whose
//! bytes are overwritten (unsetting a variable only drops its pointer). Both
//! happen first thing in `main`, before any thread starts, and the values
//! stay available to the configuration's loading through [`var`].

use std::collections::HashMap;
use std::ffi::CString;
use std::sync::OnceLock;

/// `SHEPHERD_DUMPABLE=1` keeps the process dumpable (for a debugger).
pub const DUMPABLE_ENV: &str = "SHEPHERD_DUMPABLE";

static TAKEN: OnceLock<HashMap<&'static str, String>> = OnceLock::new();

/// Marks this process not dumpable: its `/proc/<pid>/` files (`environ`,
/// `mem`, `fd`, …) become root's, and no process of the same user may
/// ptrace it. Lasts until the process execs another program.
pub fn not_dumpable() {
    // A debugger, or a test that looks at the process's descriptors, may
    // ask for it to stay dumpable; only whoever starts it can.
    if std::env::var_os(DUMPABLE_ENV).is_some_and(|v| v == "1") {
        return;
    }
    // SAFETY: prctl(2) with PR_SET_DUMPABLE takes plain integers.
    let r = unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
    if r != 0 {
        eprintln!(
            "warning: cannot mark the process not dumpable: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// Marks the process not dumpable and takes the secret settings out of
/// its environment, keeping their values for [`var`]. Call it once, before
/// any thread starts: changing the environment is not thread-safe.
pub fn protect() {
    not_dumpable();
    let mut taken = HashMap::new();
    for &name in shepherd_core::secrets::SECRET_ENV {
        let Ok(value) = std::env::var(name) else {
            continue;
        };
        wipe(name);
        std::env::remove_var(name);
        taken.insert(name, value);
    }
    let _ = TAKEN.set(taken);
}

/// Overwrites the value of the variable `name` where it lies in memory:
/// the environment block the kernel copied in at exec is what
/// `/proc/<pid>/environ` reads, whatever `unsetenv` does to the pointers.
fn wipe(name: &str) {
    let Ok(c_name) = CString::new(name) else {
        return;
    };
    // SAFETY: single-threaded (see `protect`), so nothing changes the
    // environment meanwhile; getenv returns the value inside the
    // `NAME=value` string, which lies in writable memory (the block exec
    // put on the stack, or one setenv allocated) and is NUL-terminated.
    // Nothing holds a reference to it: Rust's `env::var` copies.
    unsafe {
        let value = libc::getenv(c_name.as_ptr());
        if !value.is_null() {
            let len = libc::strlen(value);
            std::ptr::write_bytes(value, b'*', len);
        }
    }
}

/// The value of the environment variable `name`: the one [`protect`] took
/// out of the environment, or the environment's own.
pub fn var(name: &str) -> Option<String> {
    if let Some(v) = TAKEN.get().and_then(|t| t.get(name)) {
        return Some(v.clone());
    }
    std::env::var(name).ok()
}
