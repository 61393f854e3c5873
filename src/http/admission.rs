//! Bounded work: at most `concurrent` hook computations at once and at most
//! `queued` more calls waiting (their bodies being read or waiting for a
//! worker). A call past both is answered 429 with `Retry-After` at once,
//! before its body is read, and Metacontroller requeues the parent after
//! that many seconds. A computation holds its places until it really ends,
//! even when its caller was already answered 503, so work abandoned at the
//! deadline still counts and can never pile up behind the answers.

use std::sync::Arc;
use std::time::Instant;

use axum::http::StatusCode;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::error::Problem;

/// Seconds a refused caller is asked to wait before trying again.
pub const RETRY_AFTER_SECONDS: u64 = 1;

/// The places for hook calls.
#[derive(Clone, Debug)]
pub struct Admission {
    /// A call holds one of these from arrival to the end of its computation.
    places: Arc<Semaphore>,
    /// A call holds one of these while it computes.
    workers: Arc<Semaphore>,
    concurrent: usize,
    queued: usize,
}

/// The places one admitted call holds; dropping it frees them.
#[derive(Debug)]
pub struct Ticket {
    _place: OwnedSemaphorePermit,
    _worker: Option<OwnedSemaphorePermit>,
}

impl Admission {
    /// Room for `concurrent` computations and `queued` waiting calls.
    pub fn new(concurrent: usize, queued: usize) -> Self {
        let concurrent = concurrent.max(1);
        Admission {
            places: Arc::new(Semaphore::new(concurrent + queued)),
            workers: Arc::new(Semaphore::new(concurrent)),
            concurrent,
            queued,
        }
    }

    /// A place for a new call, or 429 when every place is taken.
    pub fn enter(&self) -> Result<Ticket, Problem> {
        match Arc::clone(&self.places).try_acquire_owned() {
            Ok(place) => Ok(Ticket {
                _place: place,
                _worker: None,
            }),
            Err(_) => Err(Problem::new(
                StatusCode::TOO_MANY_REQUESTS,
                format!(
                    "{} hook calls are computing and {} waiting, the most this server takes; retry after {RETRY_AFTER_SECONDS} s (Metacontroller does), or raise --max-concurrent-hooks / --max-queued-hooks",
                    self.concurrent, self.queued
                ),
            )),
        }
    }

    /// Waits for a worker until `deadline`; 503 when none frees up in time,
    /// so a call that could not start before its deadline never starts.
    pub async fn work(&self, mut ticket: Ticket, deadline: Instant) -> Result<Ticket, Problem> {
        let wait =
            tokio::time::timeout_at(deadline.into(), Arc::clone(&self.workers).acquire_owned());
        match wait.await {
            Ok(Ok(worker)) if Instant::now() < deadline => {
                ticket._worker = Some(worker);
                Ok(ticket)
            }
            _ => Err(Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "no worker was free before the deadline ({} computing); nothing was changed, Metacontroller will retry",
                    self.concurrent
                ),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn places_run_out_into_429_and_come_back_when_dropped() {
        let admission = Admission::new(1, 1);
        let first = admission.enter().unwrap();
        let second = admission.enter().unwrap();
        let refused = admission.enter().unwrap_err();
        assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
        assert!(
            refused.detail.contains("--max-concurrent-hooks"),
            "{}",
            refused.detail
        );
        let soon = Instant::now() + Duration::from_secs(5);
        let working = admission.work(first, soon).await.unwrap();
        // The second call waits for the one worker and gives up at its deadline.
        let waited = admission
            .work(second, Instant::now() + Duration::from_millis(20))
            .await
            .unwrap_err();
        assert_eq!(waited.status, StatusCode::SERVICE_UNAVAILABLE);
        drop(working);
        let again = admission.enter().unwrap();
        assert!(admission.work(again, soon).await.is_ok());
    }

    #[tokio::test]
    async fn a_deadline_already_past_never_starts_work() {
        let admission = Admission::new(2, 0);
        let ticket = admission.enter().unwrap();
        let past = Instant::now() - Duration::from_millis(1);
        assert!(admission.work(ticket, past).await.is_err());
    }
}
