//! Carries the steps of all of one worker's runs to the server together.
//!
//! Each running agent's supervision loop used to post its own steps (`POST
//! /api/v1/runs/{id}/steps`): with hundreds of agents printing, that is
//! hundreds of requests a second from one worker token, each paying for
//! HTTP, authentication and a commit, and past the server's per-token
//! request cap the excess is refused (429) and waits. The courier takes
//! every run's next batch of steps instead and sends whatever has gathered
//! as one `POST /api/v1/worker/orchestrator/steps`: nothing waits for a
//! timer (an idle courier sends a lone run's steps at once), and while a
//! request is on its way the next one fills up, so the number of requests
//! follows the server's pace rather than the agents'.
//!
//! Each run still awaits its own answer, fenced by its own claim token, and
//! keeps its steps in its spool until the server acknowledged them: what
//! the courier loses in a crash, the run sends again (a resent batch is
//! acknowledged without being stored twice).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use shepherd_client::{Client, ClientError};
use shepherd_protocol as p;
use tokio::sync::{mpsc, oneshot, Semaphore};

/// Requests a courier keeps on their way at once: enough to overlap one
/// request's round trip with the next one's filling, far below the server's
/// per-token cap.
const IN_FLIGHT: usize = 4;
/// The most runs in one request (the route's own bound).
const MAX_RUNS: usize = 500;
/// The most steps in one request (the route's own bound).
const MAX_STEPS: usize = 1000;

type Answer = Result<p::AppendAck, ClientError>;

struct Parcel {
    run: p::RunSteps,
    answer: oneshot::Sender<Answer>,
}

/// A handle on one worker's courier; the courier stops when every handle
/// is gone.
#[derive(Clone)]
pub struct StepCourier {
    parcels: mpsc::UnboundedSender<Parcel>,
    /// Set once the server answered that it has no batch route (an older
    /// server): every run then posts its own steps, as before.
    unbatched: Arc<AtomicBool>,
    connector: Client,
}

impl StepCourier {
    /// Starts the courier of worker `worker_id`, which sends with
    /// `connector` (that worker's token).
    pub fn start(connector: Client, worker_id: String) -> StepCourier {
        let (tx, rx) = mpsc::unbounded_channel();
        let unbatched = Arc::new(AtomicBool::new(false));
        tokio::spawn(carry(connector.clone(), worker_id, rx, unbatched.clone()));
        StepCourier {
            parcels: tx,
            unbatched,
            connector,
        }
    }

    /// Sends `steps` of run `run_id` with the next request and waits for
    /// the server's answer to them: the same answer (or refusal) as `POST
    /// /api/v1/runs/{run_id}/steps` would give.
    pub async fn send(&self, run_id: &str, steps: p::AppendSteps) -> Answer {
        if self.unbatched.load(Ordering::Relaxed) {
            return self.connector.append_steps(run_id, &steps).await;
        }
        let (answer, answered) = oneshot::channel();
        let parcel = Parcel {
            run: p::RunSteps {
                run_id: run_id.to_owned(),
                claim_token: steps.claim_token,
                start_index: steps.start_index,
                steps: steps.steps,
            },
            answer,
        };
        if self.parcels.send(parcel).is_err() {
            return Err(ClientError::Unreachable {
                message: "the runner is stopping".into(),
            });
        }
        answered.await.unwrap_or_else(|_| {
            Err(ClientError::Unreachable {
                message: "the runner is stopping".into(),
            })
        })
    }
}

async fn carry(
    connector: Client,
    worker_id: String,
    mut parcels: mpsc::UnboundedReceiver<Parcel>,
    unbatched: Arc<AtomicBool>,
) {
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    // A parcel that did not fit the last request: it opens the next one.
    let mut held: Option<Parcel> = None;
    loop {
        let first = match held.take() {
            Some(p) => p,
            None => match parcels.recv().await {
                Some(p) => p,
                None => return,
            },
        };
        // Waiting for a free slot is what lets the next request fill up.
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let mut steps = first.run.steps.len();
        let mut batch = vec![first];
        while batch.len() < MAX_RUNS {
            let Ok(p) = parcels.try_recv() else { break };
            if steps + p.run.steps.len() > MAX_STEPS {
                held = Some(p);
                break;
            }
            steps += p.run.steps.len();
            batch.push(p);
        }
        let (connector, worker_id, unbatched) =
            (connector.clone(), worker_id.clone(), unbatched.clone());
        tokio::spawn(async move {
            deliver(&connector, &worker_id, batch, &unbatched).await;
            drop(slot);
        });
    }
}

/// Sends one request and hands each run its own answer.
async fn deliver(connector: &Client, worker_id: &str, batch: Vec<Parcel>, unbatched: &AtomicBool) {
    let (runs, answers): (Vec<p::RunSteps>, Vec<oneshot::Sender<Answer>>) =
        batch.into_iter().map(|p| (p.run, p.answer)).unzip();
    let body = p::StepBatchBody {
        worker_id: Some(worker_id.to_owned()),
        runs,
    };
    match connector.append_steps_batch(&body).await {
        Ok(res) if res.results.len() == answers.len() => {
            for (result, answer) in res.results.into_iter().zip(answers) {
                let _ = answer.send(answer_of(result));
            }
        }
        Ok(res) => {
            let e = ClientError::Decode {
                message: format!(
                    "the server answered {} results for {} runs' steps",
                    res.results.len(),
                    answers.len()
                ),
            };
            for answer in answers {
                let _ = answer.send(Err(e.clone()));
            }
        }
        Err(ClientError::Api { status, code, .. })
            if code == "route_not_found" || status == 405 =>
        {
            tracing::info!("the server has no step batches; each run posts its own steps");
            unbatched.store(true, Ordering::Relaxed);
            for (run, answer) in body.runs.into_iter().zip(answers) {
                let steps = p::AppendSteps {
                    claim_token: run.claim_token,
                    start_index: run.start_index,
                    steps: run.steps,
                };
                let _ = answer.send(connector.append_steps(&run.run_id, &steps).await);
            }
        }
        Err(e) => {
            for answer in answers {
                let _ = answer.send(Err(e.clone()));
            }
        }
    }
}

fn answer_of(r: p::RunStepsResult) -> Answer {
    if r.ok {
        return Ok(p::AppendAck {
            ok: true,
            accepted: r.accepted.unwrap_or(0),
            duplicates: r.duplicates.unwrap_or(0),
            next_index: r.next_index.unwrap_or(0),
        });
    }
    let (code, message) = r
        .error
        .map(|e| (e.code, e.message))
        .unwrap_or_else(|| ("invalid_response".into(), "refused without a reason".into()));
    Err(ClientError::Api {
        status: r.status.unwrap_or(409),
        code,
        message,
    })
}
