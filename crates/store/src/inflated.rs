//! A process-wide cache of inflated finished transcripts, keyed by content.
//!
//! Loading a conversation sends every finished reply's steps. Inflating and
//! syntax-checking each reply's gzip blob on every load was most of the
//! server's share of a long conversation's load time, and the blobs never
//! change once a run has ended. They can disappear, though: `prune` deletes
//! them, possibly from another process, so nothing here can be told when an
//! entry goes stale. The cache is therefore keyed by what the row holds now:
//! the run id, the blob's length and its gzip trailer (the CRC-32 and size of
//! the inflated text). A load still reads the compressed blob, a small
//! fraction of the inflated size, and a pruned, rewritten or corrupt blob can
//! never be answered from the cache.
//!
//! Bounded by the inflated bytes it holds; when full, the least recently
//! used half is dropped in one pass, so the common case (a hit) is one hash
//! lookup under a short lock.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use shepherd_core::transcript::{self, StepsJson, TranscriptError};

/// Inflated bytes held at most (a few hundred long conversations).
const BUDGET_BYTES: usize = 64 << 20;

/// A blob larger than this share of the budget is never cached.
const MAX_ENTRY_BYTES: usize = BUDGET_BYTES / 8;

#[derive(Clone, PartialEq, Eq, Hash)]
struct Key {
    run_id: String,
    blob_len: usize,
    trailer: [u8; 8],
}

impl Key {
    fn of(run_id: &str, blob: &[u8]) -> Option<Self> {
        // A gzip member ends with CRC-32 and ISIZE; anything shorter than a
        // header plus trailer is not a blob worth remembering.
        let trailer: [u8; 8] = blob.get(blob.len().checked_sub(8)?..)?.try_into().ok()?;
        (blob.len() >= 18).then(|| Self {
            run_id: run_id.to_owned(),
            blob_len: blob.len(),
            trailer,
        })
    }
}

struct Entry {
    steps: StepsJson,
    last_used: u64,
}

#[derive(Default)]
struct Cache {
    entries: HashMap<Key, Entry>,
    bytes: usize,
    clock: u64,
}

impl Cache {
    fn get(&mut self, key: &Key) -> Option<StepsJson> {
        self.clock += 1;
        let clock = self.clock;
        self.entries.get_mut(key).map(|e| {
            e.last_used = clock;
            e.steps.clone()
        })
    }

    fn put(&mut self, key: Key, steps: StepsJson) {
        let size = steps.as_str().len();
        if size > MAX_ENTRY_BYTES {
            return;
        }
        if self.bytes + size > BUDGET_BYTES {
            self.evict_older_half();
        }
        self.clock += 1;
        let entry = Entry {
            steps,
            last_used: self.clock,
        };
        if let Some(old) = self.entries.insert(key, entry) {
            self.bytes -= old.steps.as_str().len();
        }
        self.bytes += size;
    }

    fn evict_older_half(&mut self) {
        let mut ages: Vec<u64> = self.entries.values().map(|e| e.last_used).collect();
        let mid = ages.len() / 2;
        let (_, cutoff, _) = ages.select_nth_unstable(mid);
        let cutoff = *cutoff;
        let mut freed = 0;
        self.entries.retain(|_, e| {
            let keep = e.last_used > cutoff;
            if !keep {
                freed += e.steps.as_str().len();
            }
            keep
        });
        self.bytes -= freed;
    }
}

fn cache() -> &'static Mutex<Cache> {
    static CACHE: OnceLock<Mutex<Cache>> = OnceLock::new();
    CACHE.get_or_init(Default::default)
}

/// The steps of run `run_id`'s stored transcript `blob`, from the cache when
/// this exact blob was inflated before.
pub fn steps_json(run_id: &str, blob: &[u8]) -> Result<StepsJson, TranscriptError> {
    let Some(key) = Key::of(run_id, blob) else {
        return transcript::decompress_json(blob);
    };
    // A poisoned lock only means another load panicked mid-update; the map
    // is still a valid cache (at worst an entry's byte count is off).
    if let Some(hit) = cache().lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
        return Ok(hit);
    }
    let steps = transcript::decompress_json(blob)?;
    cache()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .put(key, steps.clone());
    Ok(steps)
}

#[cfg(test)]
mod tests {
    use super::*;
    use shepherd_core::transcript::{compress, ActionContent, TranscriptStep};

    fn blob(text: &str) -> Vec<u8> {
        compress(&[TranscriptStep::Action {
            content: vec![ActionContent::Text { text: text.into() }],
        }])
    }

    #[test]
    fn a_changed_blob_is_inflated_again_not_served_from_the_cache() {
        let run = format!("run-{}", uuid::Uuid::now_v7());
        let first = steps_json(&run, &blob("first")).unwrap();
        assert!(first.as_str().contains("first"));
        // Same run, same length, other content: the trailer's CRC differs.
        let second = steps_json(&run, &blob("other")).unwrap();
        assert!(second.as_str().contains("other"), "{}", second.as_str());
        assert_eq!(steps_json(&run, &blob("first")).unwrap(), first);
    }

    #[test]
    fn a_corrupt_blob_is_an_error_even_after_a_good_one_was_cached() {
        let run = format!("run-{}", uuid::Uuid::now_v7());
        let good = blob("fine");
        steps_json(&run, &good).unwrap();
        let mut bad = good.clone();
        let n = bad.len();
        bad[n / 2] ^= 0xff;
        bad[n - 8] ^= 0xff; // the trailer changes too: not the cached blob
        assert!(steps_json(&run, &bad).is_err());
    }

    #[test]
    fn eviction_keeps_the_byte_count_within_budget() {
        let mut c = Cache::default();
        let text = "x".repeat(MAX_ENTRY_BYTES - 16);
        let steps = StepsJson::from_json(format!(r#"["{text}"]"#)).unwrap();
        for i in 0..20u8 {
            let key = Key {
                run_id: format!("r{i}"),
                blob_len: 100,
                trailer: [i; 8],
            };
            c.put(key, steps.clone());
            assert!(c.bytes <= BUDGET_BYTES, "{} bytes after {i}", c.bytes);
        }
        let held: usize = c.entries.values().map(|e| e.steps.as_str().len()).sum();
        assert_eq!(held, c.bytes);
        assert!(c
            .get(&Key {
                run_id: "r19".into(),
                blob_len: 100,
                trailer: [19; 8]
            })
            .is_some());
    }
}
