//! Every error code the sources build is in the one list,
//! `shepherd_core::error::codes::ERROR_CODES`, which the OpenAPI document's
//! `ErrorDetail.code` enum is generated from; and that enum is what the
//! served document says.
//!
//! Codes are strings where errors are built, so the compiler cannot check
//! them: this test reads every crate's sources and finds each string in a
//! place that names a code (an `Error` constructor, `validate_id`, the
//! HTTP layer's refusals and its reshaping of answers it did not write).

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use shepherd_core::error::codes::{is_listed, ERROR_CODES};

/// The production sources of every crate that answers HTTP requests or
/// builds the errors they answer with. Tests, benchmarks and `#[cfg(test)]`
/// modules make up codes of their own; the client and the MCP tools have
/// their own codes for failures on their side (`http_error`), which never
/// reach the server's answers.
fn sources() -> Vec<(PathBuf, String)> {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut out = Vec::new();
    let mut dirs = vec![crates];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("a readable directory") {
            let path = entry.expect("a directory entry").path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if path.is_dir() {
                if !["target", "tests", "benches", "examples", "client", "mcp"].contains(&name) {
                    dirs.push(path);
                }
            } else if name.ends_with(".rs") {
                let text = std::fs::read_to_string(&path).expect("a readable source file");
                let production = match text.find("#[cfg(test)]") {
                    Some(tests) => text[..tests].to_owned(),
                    None => text,
                };
                out.push((path, production));
            }
        }
    }
    out
}

/// What stands where a code goes: a string literal, or a constant.
enum Argument<'a> {
    Code(&'a str),
    Constant(&'a str),
}

/// The argument right after `at` (skipping whitespace), if it is a literal
/// snake_case word or a constant (`DB_UNAVAILABLE`, `crate::sql::X`).
fn argument(text: &str, at: usize) -> Option<Argument<'_>> {
    let rest = text[at..].trim_start();
    if let Some(rest) = rest.strip_prefix('"') {
        let word = &rest[..rest.find('"')?];
        return word
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
            .then_some(Argument::Code(word));
    }
    let path_end = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .unwrap_or(rest.len());
    let name = rest[..path_end].rsplit("::").next()?;
    let is_constant = name.len() > 1
        && name.starts_with(|c: char| c.is_ascii_uppercase())
        && name
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
    is_constant.then_some(Argument::Constant(name))
}

/// Where a code is the first argument, or the second after a kind.
const FIRST_ARGUMENT: &[&str] = &[
    "Error::bad_request(",
    "Error::not_found(",
    "Error::conflict(",
    "Error::invalid(",
    "Error::forbidden(",
    "Error::capacity(",
    "Error::unavailable(",
];
const AFTER_ONE_ARGUMENT: &[&str] = &["Error::new(", "validate_id(", "error_response(", "refuse("];

/// What one source file says about codes.
#[derive(Default)]
struct Found {
    codes: Vec<String>,
    /// Constants passed where a code goes.
    constants: Vec<String>,
    /// `const NAME: &str = "…";` definitions.
    definitions: Vec<(String, String)>,
}

impl Found {
    fn note(&mut self, arg: Option<Argument<'_>>) {
        match arg {
            Some(Argument::Code(code)) => self.codes.push(code.to_owned()),
            Some(Argument::Constant(name)) => self.constants.push(name.to_owned()),
            None => {}
        }
    }
}

fn scan(text: &str, is_http_layer: bool) -> Found {
    let mut found = Found::default();
    for call in FIRST_ARGUMENT {
        for (at, _) in text.match_indices(call) {
            found.note(argument(text, at + call.len()));
        }
    }
    for call in AFTER_ONE_ARGUMENT {
        for (at, _) in text.match_indices(call) {
            let args = &text[at + call.len()..];
            // The first argument is a kind or a short literal: no nested
            // call and no comma inside it.
            let Some(comma) = args.find(',') else {
                continue;
            };
            if !args[..comma].contains('(') {
                found.note(argument(args, comma + 1));
            }
        }
    }
    // `let code = if … { "…" } else { "…" };`: a code chosen before the
    // error is built.
    for (at, _) in text.match_indices("let code = ") {
        let statement = &text[at..];
        let statement = &statement[..statement.find(';').unwrap_or(statement.len())];
        for (quote, _) in statement.match_indices('"') {
            if let Some(Argument::Code(code)) = argument(statement, quote) {
                found.codes.push(code.to_owned());
            }
        }
    }
    // `code: "…"`: an error body built by hand.
    for (at, _) in text.match_indices("code: ") {
        if let Some(Argument::Code(code)) = argument(text, at + "code: ".len()) {
            found.codes.push(code.to_owned());
        }
    }
    // The HTTP layer's status tables (`code_of`, `explain`): the word each
    // arm (`400 => "…"` or `400 => ("…", …)`) answers with.
    if is_http_layer {
        for (at, _) in text.match_indices("=> ") {
            let arm = text[at + "=> ".len()..].trim_start();
            let arm = arm.strip_prefix('(').unwrap_or(arm);
            if let Some(Argument::Code(code)) = argument(arm, 0) {
                found.codes.push(code.to_owned());
            }
        }
    }
    for (at, _) in text.match_indices("const ") {
        let rest = &text[at + "const ".len()..];
        let Some((name, value)) = rest.split_once(": &str = ") else {
            continue;
        };
        if name.contains(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            continue;
        }
        if let Some(Argument::Code(code)) = argument(value, 0) {
            found.definitions.push((name.to_owned(), code.to_owned()));
        }
    }
    found
}

#[test]
fn every_code_the_sources_build_is_listed() {
    let mut codes: BTreeSet<(String, String)> = BTreeSet::new();
    let mut constants = BTreeSet::new();
    let mut definitions = Vec::new();
    for (path, text) in sources() {
        let is_http_layer = ["reject.rs", "parse_errors.rs"]
            .iter()
            .any(|f| path.ends_with(Path::new("api/src").join(f)));
        let found = scan(&text, is_http_layer);
        let at = path.display().to_string();
        codes.extend(found.codes.into_iter().map(|c| (c, at.clone())));
        constants.extend(found.constants);
        definitions.extend(found.definitions.into_iter().map(|d| (d, at.clone())));
    }
    for ((name, code), at) in definitions {
        if constants.contains(&name) {
            codes.insert((code, at));
        }
    }
    let unlisted: Vec<_> = codes.iter().filter(|(code, _)| !is_listed(code)).collect();
    assert!(
        unlisted.is_empty(),
        "codes missing from shepherd_core::error::codes: {unlisted:#?}"
    );
    // The scan finds what it should: a sample of codes from each layer.
    let seen: BTreeSet<&str> = codes.iter().map(|(c, _)| c.as_str()).collect();
    for code in [
        "task_not_found",
        "claim_stale",
        "invalid_vtid",
        "uri_too_long",
        "overloaded",
        "task_not_claimable",
        "database_unavailable",
        "restore_failed",
    ] {
        assert!(seen.contains(code), "the scan missed {code}");
    }
}

#[tokio::test]
async fn the_document_lists_every_code() {
    let env = common::Env::new(common::Kind::Sqlite);
    let server = common::Server::start(&env).await;
    let (status, doc) = server.get("/api/openapi.json", None).await;
    assert_eq!(status, 200);
    let code = &doc["components"]["schemas"]["ErrorDetail"]["properties"]["code"];
    let listed: Vec<&str> = code["enum"]
        .as_array()
        .expect("an enum of codes")
        .iter()
        .filter_map(|c| c.as_str())
        .collect();
    let all: Vec<&str> = ERROR_CODES.iter().map(|c| c.code).collect();
    assert_eq!(listed, all);
    let description = code["description"].as_str().expect("a description");
    for c in ERROR_CODES {
        assert!(
            description.contains(&format!("`{}`: {}", c.code, c.description)),
            "{}",
            c.code
        );
    }
}
