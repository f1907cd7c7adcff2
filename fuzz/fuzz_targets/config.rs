//! The configuration loader (`crates/config`) fed arbitrary
//! `shepherd.toml` text and `SHEPHERD_*` variables: an error is fine, a
//! panic is not. A configuration that loads must describe itself
//! (`shepherd config`) without showing its secrets, and its agents' retry
//! backoffs must stay within their bounds.
//!
//! Input: the file's text, then optionally a NUL byte and `KEY=VALUE`
//! lines for the environment. `SHEPHERD_LISTEN` is fixed to a literal
//! address: a host name there is resolved through DNS, which is neither
//! the loader's code nor fast.

#![no_main]

use std::collections::HashMap;
use std::path::Path;

use libfuzzer_sys::fuzz_target;
use shepherd_config::Config;

fuzz_target!(|data: &[u8]| {
    let (file, env) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    // The loader reads the file as UTF-8 and refuses anything else.
    let Ok(file) = std::str::from_utf8(file) else {
        return;
    };
    let env = String::from_utf8_lossy(env);
    let mut vars: HashMap<&str, &str> = env.lines().filter_map(|l| l.split_once('=')).collect();
    vars.insert("SHEPHERD_LISTEN", "127.0.0.1:7700");
    let lookup = |k: &str| vars.get(k).map(|v| (*v).to_owned());

    let Ok(config) = Config::load_text(Path::new("/etc/shepherd/shepherd.toml"), file, &lookup)
    else {
        return;
    };
    let rows = config.effective();
    if config.auth_token.is_some() {
        let row = rows
            .iter()
            .find(|r| r.key == "auth_token")
            .expect("a token row");
        assert_eq!(row.value, "***", "the token is shown");
    }
    let _ = config.check_exposure();
    for agent in config.agents.values() {
        if let Some(b) = agent.retry_backoff {
            for failures in [0, 1, 2, 30, 63, 64, i64::MAX] {
                for jitter in [0.0, 0.5, 0.999_999] {
                    let d = b.delay_ms(failures, jitter);
                    assert!((0..=b.max_ms).contains(&d), "{b:?} waits {d} ms");
                }
            }
        }
    }
});
