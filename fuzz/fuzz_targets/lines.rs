//! The runner's byte line reader (`runner/src/lines.rs`) over arbitrary
//! agent output, delivered in arbitrary chunk sizes, with arbitrary line
//! bounds: reading never fails or panics, no ASCII byte is dropped or
//! invented, and with a bound above every line's length the lines are
//! exactly the input split at `\n` (a `\r\n` counting as `\n`), decoded
//! lossily.
//!
//! Input: a chunk size byte, a bound byte, then the output.

#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use shepherd_runner::lines::LossyLines;

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a current-thread runtime")
    })
}

fn read_all(input: &[u8], max: usize, chunk: usize) -> Vec<String> {
    runtime().block_on(async {
        let reader = tokio::io::BufReader::with_capacity(chunk, input);
        let mut lines = LossyLines::new(reader, max);
        let mut out = Vec::new();
        while let Some(l) = lines.next_line().await.expect("reading memory cannot fail") {
            out.push(l);
        }
        out
    })
}

/// The input split at `\n`, a `\r` before one dropped, each line decoded
/// lossily; a final newline ends the last line without opening another.
fn reference(input: &[u8]) -> Vec<String> {
    let mut lines: Vec<&[u8]> = input.split(|&b| b == b'\n').collect();
    let unterminated = lines.pop().filter(|l| !l.is_empty());
    let mut out: Vec<String> = lines
        .into_iter()
        .map(|l| String::from_utf8_lossy(l.strip_suffix(b"\r").unwrap_or(l)).into_owned())
        .collect();
    out.extend(unterminated.map(|l| String::from_utf8_lossy(l).into_owned()));
    out
}

fuzz_target!(|data: &[u8]| {
    let [chunk, bound, input @ ..] = data else {
        return;
    };
    let chunk = usize::from(*chunk % 64) + 1;
    let max = usize::from(*bound);

    let got = read_all(input, max, chunk);
    let ascii = |b: &u8| b.is_ascii() && *b != b'\n' && *b != b'\r';
    let ascii_in: Vec<u8> = input.iter().filter(|b| ascii(b)).copied().collect();
    let ascii_out: Vec<u8> = got.concat().bytes().filter(|b| ascii(b)).collect();
    assert_eq!(ascii_out, ascii_in, "ASCII bytes dropped or invented");

    let longest = input
        .split(|&b| b == b'\n')
        .map(<[u8]>::len)
        .max()
        .unwrap_or(0);
    if longest < max.max(4) {
        assert_eq!(got, reference(input), "lines differ from the input's");
    }
    if let Ok(text) = std::str::from_utf8(input) {
        if !text.contains('\r') {
            for piece in &got {
                assert!(
                    piece.len() <= max.max(4),
                    "{piece:?} is over the bound {max}"
                );
            }
            assert_eq!(
                got.concat(),
                text.replace('\n', ""),
                "valid text was altered"
            );
        }
    }
});
