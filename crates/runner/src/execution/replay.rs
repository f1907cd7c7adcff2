//! Reading a run's output again after its runner died without recording how
//! far it had read (a SIGKILL, a power cut, a crash of the server that the
//! built-in runner lives in).
//!
//! The step spool knows where its last step made at an idle point was made
//! (the offsets read of `out` and `err`, [`crate::spool::Spool::resume_point`]):
//! every byte before them is in a stored step. So the output is read again
//! up to exactly there with a fresh adapter, whose steps are dropped (the
//! spool has them) and whose buffer there is dropped too (it was empty in
//! the runner that died); what only the output holds comes back (the
//! agent's session id, its usage, its result, the tails kept for a failure
//! reason); and the run is followed on from those offsets. Counting steps
//! again instead would be wrong for `text`, whose bursts end where the
//! agent went quiet: read again at once, the same output makes fewer,
//! larger steps.

use std::io::Read;

use shepherd_core::adapters::{adapter_for, Adapter, AdapterOutput, TranscriptFormat};

use super::tail::{push_tail, LineCutter};
use crate::shim::RunFiles;

/// The most read from a file at once.
const READ_CHUNK: u64 = 256 * 1024;

/// A run's output read again up to a mark.
pub(super) struct Replayed {
    /// An adapter that has read the output up to the mark, holding nothing.
    pub(super) adapter: Box<dyn Adapter>,
    /// What it made besides steps (session id, usage, result, status,
    /// progress), in order.
    pub(super) outputs: Vec<AdapterOutput>,
    pub(super) out_tail: String,
    pub(super) err_tail: String,
}

/// Reads `out` up to `upto.0` and `err` up to `upto.1` as the supervision
/// loop would have (standard error is a transcript only for `text`).
pub(super) fn replay(
    run: &RunFiles,
    format: TranscriptFormat,
    upto: (u64, u64),
) -> std::io::Result<Replayed> {
    let mut adapter = adapter_for(format);
    let mut outputs = Vec::new();
    let mut out_tail = String::new();
    let mut err_tail = String::new();
    let mut keep = |made: Vec<AdapterOutput>| {
        outputs.extend(
            made.into_iter()
                .filter(|o| !matches!(o, AdapterOutput::Step(_))),
        );
    };
    for_each_line(run, "out", upto.0, |line| {
        push_tail(&mut out_tail, &line);
        keep(adapter.push_line(&line));
    })?;
    for_each_line(run, "err", upto.1, |line| {
        push_tail(&mut err_tail, &line);
        if format == TranscriptFormat::Text {
            keep(adapter.push_line(&line));
        }
    })?;
    // Whatever the adapter holds here was in the dead runner's steps.
    keep(adapter.flush());
    Ok(Replayed {
        adapter,
        outputs,
        out_tail,
        err_tail,
    })
}

/// Hands on each line of the run's file `name` that ends at or before
/// `upto`, cut exactly as a follower cuts it.
fn for_each_line(
    run: &RunFiles,
    name: &str,
    upto: u64,
    mut each: impl FnMut(String),
) -> std::io::Result<()> {
    if upto == 0 {
        return Ok(());
    }
    let mut file = std::fs::File::open(run.path(name))?.take(upto);
    let mut cutter = LineCutter { offset: 0 };
    let mut buf = Vec::new();
    loop {
        let n = file.by_ref().take(READ_CHUNK).read_to_end(&mut buf)?;
        for (line, _) in cutter.cut(&mut buf) {
            each(line);
        }
        if n == 0 {
            break;
        }
    }
    // A mark inside a line is the end of an unfinished last line, handed on
    // once the agent had exited.
    if let Some((line, _)) = cutter.rest(&mut buf) {
        each(line);
    }
    Ok(())
}
