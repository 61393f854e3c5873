//! Bounded work: at most `concurrent` hook computations at once, at most
//! `queued` more calls waiting (their bodies being read or waiting for a
//! worker), and at most `buffered` bytes of bodies held by all of them (a
//! body counts its declared length, or the largest allowed when it declares
//! none). A call past any of these is answered 429 with `Retry-After` before
//! its body is read, and Metacontroller requeues the parent after that many
//! seconds. Small calls queue freely; large ones are refused early. A computation holds its places until it really ends,
//! even when its caller was already answered 503, so work abandoned at the
//! deadline still counts and can never pile up behind the answers.

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::error::{Problem, RETRY_AFTER_SECONDS, Refusal};

/// The places for hook calls.
#[derive(Clone, Debug)]
pub(super) struct Admission {
    /// A call holds one of these from arrival to the end of its computation.
    places: Arc<Semaphore>,
    /// A call holds one of these while it computes.
    workers: Arc<Semaphore>,
    /// A call holds one per KiB of its body until its computation ends.
    kib: Arc<Semaphore>,
    concurrent: usize,
    queued: usize,
    buffered: usize,
}

/// The places one admitted call holds; dropping it frees them.
#[derive(Debug)]
pub(super) struct Ticket {
    _place: OwnedSemaphorePermit,
    _kib: OwnedSemaphorePermit,
    _worker: Option<OwnedSemaphorePermit>,
}

impl Admission {
    /// Room for `concurrent` computations, `queued` waiting calls and
    /// `buffered` bytes of bodies.
    pub(super) fn new(concurrent: usize, queued: usize, buffered: usize) -> Self {
        let concurrent = concurrent.max(1);
        Admission {
            places: Arc::new(Semaphore::new(concurrent + queued)),
            workers: Arc::new(Semaphore::new(concurrent)),
            kib: Arc::new(Semaphore::new(kib(buffered as u64).max(1) as usize)),
            concurrent,
            queued,
            buffered,
        }
    }

    /// A place for a new call whose body is `size` bytes long (the most a
    /// body may be when it does not say), or 429.
    pub(super) fn enter(&self, size: u64) -> Result<Ticket, Problem> {
        let full = |what: String| {
            Problem::from(Refusal::Overloaded(format!(
                "{what}, the most this server takes; retry after {RETRY_AFTER_SECONDS} s (Metacontroller does), or raise --max-concurrent-hooks, --max-queued-hooks or --max-buffered-bytes"
            )))
        };
        let place = Arc::clone(&self.places).try_acquire_owned().map_err(|_| {
            full(format!(
                "{} hook calls are computing and {} waiting",
                self.concurrent, self.queued
            ))
        })?;
        // Never more than the whole budget, so one body alone always fits.
        let wanted = kib(size).min(self.kib_total());
        let kib = Arc::clone(&self.kib)
            .try_acquire_many_owned(wanted)
            .map_err(|_| {
                full(format!(
                    "the bodies of the calls in progress and this one's {size} bytes are over {} bytes",
                    self.buffered
                ))
            })?;
        Ok(Ticket {
            _place: place,
            _kib: kib,
            _worker: None,
        })
    }

    fn kib_total(&self) -> u32 {
        kib(self.buffered as u64).max(1)
    }

    /// Waits for a worker until `deadline`; 503 when none frees up in time,
    /// so a call that could not start before its deadline never starts.
    pub(super) async fn work(
        &self,
        mut ticket: Ticket,
        deadline: Instant,
    ) -> Result<Ticket, Problem> {
        let wait =
            tokio::time::timeout_at(deadline.into(), Arc::clone(&self.workers).acquire_owned());
        match wait.await {
            Ok(Ok(worker)) if Instant::now() < deadline => {
                ticket._worker = Some(worker);
                Ok(ticket)
            }
            _ => Err(Problem::from(Refusal::Deadline(format!(
                "no worker was free before the deadline ({} computing); nothing was changed, Metacontroller will retry",
                self.concurrent
            )))),
        }
    }
}

/// Whole KiB in `bytes`, rounded up (at least one: every call counts).
fn kib(bytes: u64) -> u32 {
    u32::try_from(bytes.div_ceil(1024).max(1)).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::StatusCode;
    use std::time::Duration;

    #[tokio::test]
    async fn places_run_out_into_429_and_come_back_when_dropped() {
        let admission = Admission::new(1, 1, 1 << 20);
        let first = admission.enter(100).unwrap();
        let second = admission.enter(100).unwrap();
        let refused = admission.enter(100).unwrap_err();
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
        let again = admission.enter(100).unwrap();
        assert!(admission.work(again, soon).await.is_ok());
    }

    #[tokio::test]
    async fn a_deadline_already_past_never_starts_work() {
        let admission = Admission::new(2, 0, 1 << 20);
        let ticket = admission.enter(1).unwrap();
        let past = Instant::now() - Duration::from_millis(1);
        assert!(admission.work(ticket, past).await.is_err());
    }
}

#[cfg(test)]
mod budget {
    use super::*;
    use axum::http::StatusCode;

    #[test]
    fn large_bodies_share_the_byte_budget_and_small_ones_still_enter() {
        let admission = Admission::new(2, 100, 10 << 20);
        let big = admission.enter(6 << 20).unwrap();
        let refused = admission.enter(6 << 20).unwrap_err();
        assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
        assert!(
            refused.detail.contains("--max-buffered-bytes"),
            "{}",
            refused.detail
        );
        let small: Vec<_> = (0..50).map(|_| admission.enter(4096).unwrap()).collect();
        drop(big);
        assert!(admission.enter(6 << 20).is_ok());
        drop(small);
        // A body larger than the whole budget still enters alone.
        let alone = Admission::new(1, 1, 1 << 20);
        assert!(alone.enter(32 << 20).is_ok());
    }
}
