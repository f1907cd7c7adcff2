//! The connector contract's progress requests (`ProgressBody`, `ProgressBatchBody`)
//! decoded from arbitrary bytes, then what the server does with a report
//! before and around the store: the workflow lookup of its event in every
//! state of every workflow, and the run workspace read from its metadata.
//! Nothing may panic; a final state never moves; a move goes to a state
//! of the workflow; a decoded body re-encodes to one that decodes the same.

#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use shepherd_core::model::RunWorkspace;
use shepherd_core::workflow::{self, Outcome};
use shepherd_protocol::{ProgressBatchBody, ProgressBody};

fn check_report(event: &str, metadata: &Value) {
    for wf in workflow::ALL {
        let knows = wf.knows_event(event);
        for state in wf.states {
            match wf.apply(state, event) {
                Outcome::Unknown => assert!(!knows, "{}: {event:?} known yet Unknown", wf.name),
                Outcome::NotFromHere => assert!(knows),
                Outcome::Move { to, .. } => {
                    assert!(knows);
                    assert!(!wf.is_final(state), "{}: final {state} moved", wf.name);
                    assert!(
                        wf.states.contains(&to),
                        "{}: moved to unknown {to}",
                        wf.name
                    );
                }
            }
        }
        // A state the workflow does not have (a corrupt row) is not a panic.
        let _ = wf.apply(event, event);
    }
    if let Some(w) = metadata.get("workspace").filter(|w| !w.is_null()) {
        if let Ok(w) = serde_json::from_value::<RunWorkspace>(w.clone()) {
            let text = serde_json::to_string(&w).expect("a workspace serialises");
            let back: RunWorkspace = serde_json::from_str(&text).expect("and reads back");
            assert_eq!(back, w);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    if let Ok(b) = serde_json::from_slice::<ProgressBody>(data) {
        check_report(&b.event, &b.metadata);
        let again: ProgressBody =
            serde_json::from_str(&serde_json::to_string(&b).unwrap()).expect("re-decodes");
        assert_eq!(
            (
                &again.worker_id,
                &again.event,
                &again.message,
                &again.claim_token,
                &again.result
            ),
            (
                &b.worker_id,
                &b.event,
                &b.message,
                &b.claim_token,
                &b.result
            )
        );
    }
    if let Ok(b) = serde_json::from_slice::<ProgressBatchBody>(data) {
        for r in &b.reports {
            check_report(&r.event, &r.metadata);
        }
        let again: ProgressBatchBody =
            serde_json::from_str(&serde_json::to_string(&b).unwrap()).expect("re-decodes");
        assert_eq!(again.reports.len(), b.reports.len());
        for (a, r) in again.reports.iter().zip(&b.reports) {
            assert_eq!(
                (&a.vtid, &a.event, &a.message, &a.claim_token, &a.result),
                (&r.vtid, &r.event, &r.message, &r.claim_token, &r.result)
            );
        }
    }
});
