//! Bounded work: at most `concurrent` hook computations at once, at most
//! `queued` more calls waiting (their bodies being read or waiting for a
//! worker), and at most `buffered` bytes of bodies held by all of them. A
//! call past the places is answered 429 with `Retry-After` before its body
//! is read, and Metacontroller requeues the parent after that many seconds.
//!
//! A large body (at least [`LARGE_BODY`] declared) holds the budget for
//! the length it declares from its entry, so the bodies admitted can all
//! finish (bodies that grew together found the budget full before any
//! ended), and one whose length is not free is refused before it is read;
//! a body that does not declare its length holds what it has received. A
//! client that declares 32 MiB and trickles it frees its place once it
//! pauses for 2 s or averages under the minimum rate (`error::read_body`).
//! A quarter of the budget is kept for small bodies (under [`LARGE_BODY`],
//! declared or as received so far): large bodies take at most the rest,
//! and Metacontroller's ordinary calls still enter.
//! A computation holds its places and its bytes until it really ends, even
//! when its caller was already answered 503, so work abandoned at the
//! deadline still counts and can never pile up behind the answers.

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::error::{Problem, RETRY_AFTER_SECONDS, Refusal};
use super::memory::LARGE_BODY;

/// The places for hook calls.
#[derive(Clone, Debug)]
pub(super) struct Admission {
    /// A call holds one of these from arrival to the end of its computation.
    places: Arc<Semaphore>,
    /// A call holds one of these while it computes.
    workers: Arc<Semaphore>,
    /// The bytes of bodies, in KiB.
    budget: Arc<Budget>,
    concurrent: usize,
    queued: usize,
}

/// The byte budget of bodies, one permit per KiB: a shared part any body
/// may hold and a reserve only small bodies may.
#[derive(Debug)]
struct Budget {
    shared: Arc<Semaphore>,
    reserve: Arc<Semaphore>,
    /// The shared part's size, in KiB: the most one body is charged, so one
    /// body alone always fits.
    shared_kib: u32,
    buffered: usize,
}

/// The places one admitted call holds; dropping it frees them.
#[derive(Debug)]
pub(super) struct Ticket {
    _place: OwnedSemaphorePermit,
    body: Held,
    _worker: Option<OwnedSemaphorePermit>,
}

/// The KiB of budget one body holds, from each part.
#[derive(Debug)]
struct Held {
    budget: Arc<Budget>,
    shared: Option<OwnedSemaphorePermit>,
    reserve: Option<OwnedSemaphorePermit>,
    /// Whether the body declared itself large: then it never takes from
    /// the reserve.
    large: bool,
}

impl Admission {
    /// Room for `concurrent` computations, `queued` waiting calls and
    /// `buffered` bytes of bodies.
    pub(super) fn new(concurrent: usize, queued: usize, buffered: usize) -> Self {
        let concurrent = concurrent.max(1);
        let total = kib(buffered as u64);
        let reserve = total / 4;
        let shared = (total - reserve).max(1);
        Admission {
            places: Arc::new(Semaphore::new(concurrent + queued)),
            workers: Arc::new(Semaphore::new(concurrent)),
            budget: Arc::new(Budget {
                shared: Arc::new(Semaphore::new(shared as usize)),
                reserve: Arc::new(Semaphore::new(reserve as usize)),
                shared_kib: shared,
                buffered,
            }),
            concurrent,
            queued,
        }
    }

    /// A place for a new call whose body declares `declared` bytes (`None`
    /// when it does not say), holding its first KiB, or the whole declared
    /// length for a large body, or 429.
    pub(super) fn enter(&self, declared: Option<u64>) -> Result<Ticket, Problem> {
        let place = Arc::clone(&self.places).try_acquire_owned().map_err(|_| {
            overloaded(format!(
                "{} hook calls are computing and {} waiting",
                self.concurrent, self.queued
            ))
        })?;
        let large = declared.is_some_and(|n| n >= LARGE_BODY as u64);
        let budget = &self.budget;
        let mut body = Held {
            budget: Arc::clone(budget),
            shared: None,
            reserve: None,
            large,
        };
        // A large body holds its whole length from the start, so the
        // bodies admitted can all finish (bodies that grew together found
        // the budget full before any ended); one whose length is not free
        // is refused before it is read.
        match declared.filter(|_| large) {
            Some(length) => body
                .grow(usize::try_from(length).unwrap_or(usize::MAX))
                .map_err(|_| budget.full(length, "this one's"))?,
            None => body.grow(0)?,
        }
        Ok(Ticket {
            _place: place,
            body,
            _worker: None,
        })
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

impl Ticket {
    /// Holds budget for `received` bytes of this call's body, or 429 when
    /// the bodies in progress leave no room for them.
    pub(super) fn hold(&mut self, received: usize) -> Result<(), Problem> {
        self.body.grow(received)
    }
}

impl Held {
    fn kib(&self) -> u32 {
        let count = |p: &Option<OwnedSemaphorePermit>| p.as_ref().map_or(0, |p| p.num_permits());
        u32::try_from(count(&self.shared) + count(&self.reserve)).unwrap_or(u32::MAX)
    }

    /// Holds enough for `received` bytes: from the shared part first, then,
    /// while the body is small, from the reserve.
    fn grow(&mut self, received: usize) -> Result<(), Problem> {
        let budget = Arc::clone(&self.budget);
        let wanted = kib(received as u64).min(budget.shared_kib);
        let more = wanted.saturating_sub(self.kib());
        if more == 0 {
            return Ok(());
        }
        let small = !self.large && received < LARGE_BODY;
        let taken = take(&budget.shared, &mut self.shared, more)
            || (small && take(&budget.reserve, &mut self.reserve, more));
        if taken {
            return Ok(());
        }
        Err(budget.full(received as u64, "this one's received"))
    }
}

impl Budget {
    /// The 429 of a body of `bytes` that finds no room.
    fn full(&self, bytes: u64, whose: &str) -> Problem {
        overloaded(format!(
            "the bodies of the calls in progress and {whose} {bytes} bytes are over {} bytes",
            self.buffered
        ))
    }
}

/// Takes `more` permits from `from` into `into`, all or none.
fn take(from: &Arc<Semaphore>, into: &mut Option<OwnedSemaphorePermit>, more: u32) -> bool {
    let Ok(permit) = Arc::clone(from).try_acquire_many_owned(more) else {
        return false;
    };
    match into {
        Some(held) => held.merge(permit),
        None => *into = Some(permit),
    }
    true
}

/// The 429 of a call that finds no room.
fn overloaded(what: String) -> Problem {
    Problem::from(Refusal::Overloaded(format!(
        "{what}, the most this server takes; retry after {RETRY_AFTER_SECONDS} s (Metacontroller does), or raise --max-concurrent-hooks, --max-queued-hooks or --max-buffered-bytes"
    )))
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
        let first = admission.enter(Some(100)).unwrap();
        let second = admission.enter(Some(100)).unwrap();
        let refused = admission.enter(Some(100)).unwrap_err();
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
        let again = admission.enter(Some(100)).unwrap();
        assert!(admission.work(again, soon).await.is_ok());
    }

    #[tokio::test]
    async fn a_deadline_already_past_never_starts_work() {
        let admission = Admission::new(2, 0, 1 << 20);
        let ticket = admission.enter(Some(1)).unwrap();
        let past = Instant::now() - Duration::from_millis(1);
        assert!(admission.work(ticket, past).await.is_err());
    }
}

#[cfg(test)]
mod budget {
    use super::*;
    use axum::http::StatusCode;

    /// Issue 31: two bodies declaring 32 MiB held the whole budget before
    /// a byte of them arrived; now such a body frees its place once it
    /// arrives too slowly (`error::read_body`), and small bodies keep a
    /// reserve the large ones never take. A large body holds the length it
    /// declares from its entry, so the bodies admitted can finish; one
    /// that does not fit is refused before it is read.
    #[test]
    fn large_bodies_hold_their_length_and_small_ones_keep_a_reserve() {
        // 6 MiB shared, 2 MiB reserved for small bodies.
        let admission = Admission::new(2, 100, 8 << 20);
        let mut first = admission.enter(Some(4 << 20)).unwrap();
        let refused = admission.enter(Some(3 << 20)).unwrap_err();
        assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
        assert!(
            refused.detail.contains("--max-buffered-bytes"),
            "{}",
            refused.detail
        );
        let mut second = admission.enter(Some(2 << 20)).unwrap();
        first.hold(4 << 20).unwrap();
        second.hold(2 << 20).unwrap();
        assert!(
            admission.enter(Some(2 << 20)).is_err(),
            "the shared part is full"
        );
        let small: Vec<_> = (0..50)
            .map(|_| {
                let mut call = admission.enter(Some(4096)).unwrap();
                call.hold(4096).unwrap();
                call
            })
            .collect();
        // A body that does not say its length takes from the reserve only
        // while it is small.
        let mut undeclared = admission.enter(None).unwrap();
        undeclared.hold(512 << 10).unwrap();
        assert!(undeclared.hold(LARGE_BODY).is_err());
        drop(first);
        let mut again = admission.enter(Some(4 << 20)).unwrap();
        again.hold(4 << 20).unwrap();
        drop((small, undeclared));
        // A body larger than the whole budget still enters alone.
        let alone = Admission::new(1, 1, 1 << 20);
        let mut call = alone.enter(Some(32 << 20)).unwrap();
        call.hold(32 << 20).unwrap();
    }

    /// Found measuring the load test: 50 concurrent 10 MiB bodies on the
    /// 48 MiB shared part were all admitted (each held its first KiB),
    /// grew together, and each found the budget full before it ended:
    /// none answered 200 (before: 6). Those admitted now finish.
    #[test]
    fn regression_concurrent_large_bodies_admitted_all_finish() {
        let admission = Admission::new(2, 100, 64 << 20);
        let mut admitted: Vec<Ticket> = (0..50)
            .filter_map(|_| admission.enter(Some(10 << 20)).ok())
            .collect();
        assert!(
            !admitted.is_empty() && admitted.len() < 50,
            "{}",
            admitted.len()
        );
        for mib in 1..=10 {
            for call in &mut admitted {
                call.hold(mib << 20).unwrap();
            }
        }
    }
}
