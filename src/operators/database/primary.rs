//! Which instance is the primary: a decision, not an ordinal.
//!
//! The designated primary is published in the role ConfigMap
//! (`<name>-role`: `primary`, `epoch`, `initialized`), which every instance
//! reads when it starts (`start.sh`), and selected by the read-write
//! Service. Instance 0 is the first; after a failover another one is. The
//! epoch counts designations and only grows.
//!
//! A failover, decided from what is observed:
//! 1. the designated primary's pod has been not ready (its `Ready`
//!    condition False since `lastTransitionTime`) for `spec.failover.delay`
//!    (counted from when the designation took effect, if later: the end of
//!    the promote Job that made it) and a standby is ready: that standby is
//!    designated at the next epoch
//!    (fencing: the old primary leaves the read-write Service, and can no
//!    longer start as a primary);
//! 2. once the role ConfigMap is observed naming it, the promote Job
//!    (`<name>-promote-<epoch>-<ordinal>`) checks that it is the most
//!    advanced standby and that the old primary does not answer as one,
//!    then promotes it;
//! 3. if the Job refuses, the next ready standby is tried at the same
//!    epoch; if every refusal said the old primary still answers as a
//!    primary, or the old primary is ready again once every one refused,
//!    the old primary is designated again (nothing was promoted).
//!
//! What survives a lost status: the role ConfigMap and the promote Jobs
//! say who was designated at which epoch; a promote Job made again for a
//! standby that was already promoted succeeds without doing anything.

use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::names::{parse_promote_job, pod_name, pod_ordinal, promote_job};
use super::observed::Observed;
use super::rollout::{self, Rollout, Serving};
use super::spec::Database;
use crate::hook::quote::quote;
use crate::operators::backup_job::RunStatus;

use recovery::{Recovery, recovery};

pub(super) mod jobs;
pub(super) mod lease;
mod recovery;
mod refusals;
pub(super) mod status;

pub(super) use refusals::Refusal;
use refusals::{refusals, refused_switchovers, rollout_gave_up};

/// Annotation on a Database asking for a planned switchover:
/// `<pod>@<epoch>`, the instance to promote and the `status.primaryEpoch`
/// the request was made at. A request of another epoch is stale (the
/// primary changed since) and is never carried out.
pub const ANNOTATION_SWITCHOVER: &str = "opshooks.io/switchover";

/// The promote Job's `MODE` for a planned switchover: it stops writes on
/// the old primary and waits for the candidate to have all of its WAL.
pub(super) const SWITCHOVER_MODE: &str = "switchover";

/// How many switchovers in a row may be refused (since the primary last
/// changed) before a rollout stops asking for one: each refused one
/// designates the old primary again at a new epoch, and a rollout asking
/// again at once would churn epochs and promote Jobs for as long as the
/// cause lasts. A switchover asked for by annotation is always tried.
pub(super) const MAX_REFUSED_SWITCHOVERS: usize = 3;

/// The failover delay when `spec.failover.delay` is not set: what the
/// RTO docs/failover.md measures at the defaults allows (`dbrealrto`). A
/// primary that restarts in place within it is not failed over; one that
/// comes back after it, while its promote Job begins, makes the Job
/// refuse at once, and it is designated again.
pub(super) const DEFAULT_DELAY_SECONDS: u32 = 3;

/// The step a change of primary has reached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// The designated primary serves (or nothing asks for a change).
    Steady,
    /// The designated primary is not ready, for less than the delay: a
    /// failover starts at `after` if it stays so.
    Waiting {
        /// Since when it is not ready.
        since: Timestamp,
        /// When the delay ends.
        after: Timestamp,
    },
    /// The delay passed, but no standby is ready to take over.
    NoCandidate {
        /// Since when the primary is not ready.
        since: Timestamp,
    },
    /// A standby was designated; the promote Job waits until the role
    /// ConfigMap is observed naming it (the old primary is fenced first).
    Fencing,
    /// Designated where nothing is known to serve (re-created over
    /// retained volumes, the role lost): its promote Job waits until the
    /// instance is ready. It starts on the data it holds when its container
    /// next starts, often out of the crash-loop back-off its reports
    /// earned, and a Job made before it answers would refuse it.
    Starting,
    /// The promote Job runs.
    Promoting,
    /// Every promote Job of this epoch failed and no standby is left to
    /// try: a person must look (the Jobs' messages say why).
    Stuck,
    /// The role was lost (an instance holds data of a later epoch than any
    /// record), and who holds the newest data is not settled: nobody new
    /// is designated, for the reason given.
    RoleLost(String),
}

/// Who is the primary and where a change of primary stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Primary {
    /// The instance designated primary: the role ConfigMap names it, the
    /// read-write Service selects it.
    pub designated: u32,
    /// The epoch of that designation.
    pub epoch: u64,
    /// The instance known to serve as the primary: the designated one,
    /// but for a change under way, when it is the one being replaced
    /// (`None` when nothing recorded which).
    pub serving: Option<u32>,
    /// Where a change stands.
    pub step: Step,
    /// The promote Job to keep or create: every observed promote Job is
    /// kept (a Job runs once); this one is desired besides.
    pub promote_job: Option<String>,
    /// A failover that succeeded and the status has not recorded yet.
    pub last: Option<Failover>,
    /// What this epoch's failed promote Jobs reported.
    pub refusals: Vec<Refusal>,
    /// The change under way is a switchover asked for: the old primary
    /// serves until the promote Job stops its writes and the candidate has
    /// all of its WAL.
    pub planned: bool,
    /// Why a switchover asked for is not carried out, if one is asked for
    /// and is not.
    pub request_ignored: Option<String>,
    /// Why a primary the status names was not believed, if one was not.
    pub status_ignored: Option<String>,
    /// The role was lost and the instance holding the newest data was
    /// designated: what each instance reported, in a sentence.
    pub recovered: Option<String>,
}

/// A failover that happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failover {
    /// When the new primary was promoted: its Job's completion.
    pub at: Option<Timestamp>,
    /// The instance that was the primary, when recorded.
    pub from: Option<u32>,
    /// The instance promoted.
    pub to: u32,
    /// The epoch it was promoted at.
    pub epoch: u64,
    /// The promote Job.
    pub job: String,
    /// A switchover asked for, not the loss of the primary.
    pub planned: bool,
}

impl Primary {
    /// True while the primary changes (designated but not yet promoted).
    pub fn changing(&self) -> bool {
        self.serving != Some(self.designated)
    }

    /// The instances that must run, counted from 0: up to the designated
    /// primary and, during a change, the one that still serves (a smaller
    /// size must never stop either).
    pub fn instances_needed(&self) -> i32 {
        let highest = self.designated.max(self.serving.unwrap_or(0));
        i32::try_from(highest).map_or(i32::MAX, |h| h.saturating_add(1))
    }
}

/// True when the designated primary's pod is ready (it may still be a
/// standby being promoted: [`is_serving`] says it serves).
pub(super) fn is_designated_ready(db: &Database, seen: &Observed, primary: &Primary) -> bool {
    seen.is_instance_ready(db, primary.designated)
}

/// True when the designated primary serves: no change under way and its
/// pod ready (what a snapshot or a restore reads from).
pub(super) fn is_serving(db: &Database, seen: &Observed, primary: &Primary) -> bool {
    !primary.changing() && is_designated_ready(db, seen, primary)
}

/// What the status recorded of the primary, read back.
struct Recorded {
    current: Option<u32>,
    target: Option<u32>,
    epoch: u64,
    last_failover_epoch: u64,
}

/// The status is what the hook wrote last, but anyone with status access
/// can write it: a primary it names counts only if that instance is
/// observed (its pod) or the StatefulSet runs it; else it is ignored, and
/// `ignored` says so.
fn recorded(db: &Database, seen: &Observed, ignored: &mut Option<String>) -> Recorded {
    let status = db.status.as_ref();
    let mut ordinal = |field: &str, pod: Option<&String>| {
        let pod = pod?;
        let exists = |o: u32| {
            i64::from(o) < i64::from(seen.statefulset_replicas())
                || seen.instances(db).any(|(i, _)| i == o)
        };
        let found = pod_ordinal(db, pod).filter(|o| exists(*o));
        if found.is_none() {
            *ignored = Some(format!(
                "status.{field} {} names no instance that runs and is ignored",
                quote(pod)
            ));
        }
        found
    };
    let current = ordinal(
        "currentPrimary",
        status.and_then(|s| s.current_primary.as_ref()),
    );
    let target = ordinal(
        "targetPrimary",
        status.and_then(|s| s.target_primary.as_ref()),
    );
    // A designation none of whose instances runs says nothing, its epoch
    // included: believed, it would start a failover to instance 0.
    let believed = ignored.is_none() || current.or(target).is_some();
    Recorded {
        current,
        target,
        epoch: status.filter(|_| believed).map_or(0, |s| s.primary_epoch),
        last_failover_epoch: status
            .and_then(|s| s.last_failover.as_ref())
            .map_or(0, |f| f.epoch),
    }
}

/// The promote Jobs observed: (epoch, ordinal, name).
fn promote_jobs<'a>(
    db: &'a Database,
    seen: &'a Observed,
) -> impl Iterator<Item = (u64, u32, &'a str)> + 'a {
    seen.jobs.keys().filter_map(move |job| {
        let (epoch, ordinal) = parse_promote_job(db, job)?;
        Some((epoch, ordinal, job.as_str()))
    })
}

/// Who is the primary, how a new template rolls out around it, and the
/// instances to run for both, from the `replicas` the size asks for. A
/// failover may start unless an upgrade (`upgrading`) or a restore
/// (`restore_lets_serve` false) holds the instances; also while deleting:
/// the final snapshot reads the primary, and a primary lost for good
/// would otherwise hold the deletion for ever.
pub(super) fn decide_all(
    db: &Database,
    seen: &Observed,
    replicas: i32,
    restore_lets_serve: bool,
    upgrading: bool,
) -> Decided {
    // The standbys counted with the instances kept up to the primary: a
    // size made smaller after a failover still has one below it.
    let steady = decide(db, seen, false, None);
    // A smaller size waits while the designated primary is not ready: the
    // standbys above the size may be the ones that take over from it, and
    // stopping them could leave no instance that holds the data.
    let mut replicas = replicas;
    if replicas > 0 && seen.was_initialized(db) && !is_designated_ready(db, seen, &steady) {
        replicas = replicas.max(seen.statefulset_replicas());
    }
    let with_steady = with_primary(replicas, &steady);
    let may_fail_over =
        !upgrading && restore_lets_serve && with_steady > 1 && seen.was_initialized(db);
    let serving = Serving {
        ordinal: steady.serving,
        changing: steady.changing(),
    };
    let rollout = rollout::decide(db, seen, with_steady, serving, may_fail_over);
    let primary = match may_fail_over {
        true => decide(db, seen, true, rollout.switchover),
        false => steady,
    };
    Decided {
        replicas: with_primary(replicas, &primary),
        primary,
        rollout,
    }
}

/// What [`decide_all`] decided.
pub(super) struct Decided {
    /// Who is the primary, and where a change of primary stands.
    pub primary: Primary,
    /// How a change of the instances' template rolls out.
    pub rollout: Rollout,
    /// How many instances the StatefulSet should run.
    pub replicas: i32,
}

/// The instances to run: at least up to the designated primary and, during
/// a change, the one still serving, which a smaller size must never stop
/// (the read-write Service would select no pod, and nothing would fail
/// over to the instances left). Moving the primary to a lower ordinal is a
/// switchover: a person asks for one, or a rollout of a new template that
/// finds the primary the highest instance. None while everything is
/// stopped.
fn with_primary(replicas: i32, primary: &Primary) -> i32 {
    if replicas == 0 {
        return 0;
    }
    replicas.max(primary.instances_needed())
}

/// Decides who is the primary. `may_fail_over`: nothing else holds the
/// instances (no upgrade or restore under way) and there are standbys at
/// all; a change already under way goes on regardless. A deletion does not
/// stop a failover: its final snapshot reads the new primary. `rollout`:
/// the standby a rollout of a new template asks to switch over to (from
/// the serving primary), when it asks.
pub(super) fn decide(
    db: &Database,
    seen: &Observed,
    may_fail_over: bool,
    rollout: Option<u32>,
) -> Primary {
    let mut status_ignored = None;
    let rec = recorded(db, seen, &mut status_ignored);
    let (designated, epoch) = designation(db, seen, &rec);
    let (designated, epoch, recovered, lost) = match recovery(db, seen, epoch) {
        Recovery::None => (designated, epoch, None, None),
        Recovery::Designate {
            ordinal,
            epoch,
            why,
        } => (ordinal, epoch, Some(why), None),
        Recovery::Unsettled(why) => (designated, epoch, None, Some(why)),
    };
    let succeeded = |e: u64, o: u32| seen.job(&promote_job(db, e, o)) == Some(RunStatus::Succeeded);
    // The primary that serves: the designated one once promoted (or the
    // first, at epoch 0), else the one the status recorded.
    let promoted = epoch == 0 || succeeded(epoch, designated);
    // No record and no success: a promote Job settles it (it succeeds at
    // once for a standby already promoted).
    let serving = if promoted {
        Some(designated)
    } else {
        rec.current
    };
    let mut primary = Primary {
        designated,
        epoch,
        serving,
        step: Step::Steady,
        promote_job: None,
        last: last_failover(db, seen, &rec),
        refusals: refusals(db, seen, epoch),
        planned: false,
        request_ignored: None,
        status_ignored,
        recovered,
    };
    if let Some(why) = lost {
        // Nothing moves while who holds the newest data is not settled.
        primary.serving = None;
        primary.step = Step::RoleLost(why);
        return primary;
    }
    let request = switchover_request(db);
    if primary.changing() {
        primary.planned = is_planned(db, seen, (designated, epoch), request, rollout);
        change(db, seen, &mut primary);
    } else if may_fail_over {
        consider_failover(db, seen, &mut primary);
        if primary.step == Step::Steady {
            consider_switchover(db, seen, request, &mut primary);
        }
        if primary.step == Step::Steady {
            consider_rollout(db, seen, rollout, &mut primary);
        }
    }
    primary
}

/// Whether the change of primary to `designated` at `epoch` is a
/// switchover (the old primary serves until the new one has its WAL)
/// rather than a failover. Once its promote Job exists, the Job says how it
/// promotes (a Job is never changed): a rollout whose template moved on, or
/// an annotation taken away, does not turn a switchover into a failover
/// half-way. Before it, the role ConfigMap published for this designation
/// says so: the primary lost, or the rollout moved on, before the Job was
/// made, a switchover is still one.
fn is_planned(
    db: &Database,
    seen: &Observed,
    (designated, epoch): (u32, u64),
    request: Option<(u32, u64)>,
    rollout: Option<u32>,
) -> bool {
    let published_as_switchover = seen.role.as_ref().is_some_and(|r| {
        r.switchover && r.epoch == epoch && pod_ordinal(db, &r.primary) == Some(designated)
    });
    match seen.job_env(&promote_job(db, epoch, designated), "MODE") {
        Some(mode) => mode == SWITCHOVER_MODE,
        None => {
            published_as_switchover
                || epoch > 0
                    && (request == Some((designated, epoch - 1)) || rollout == Some(designated))
        }
    }
}

/// The rollout's own switchover request, to `rollout`: at the epoch in
/// force, until switchovers were refused too many times in a row.
fn consider_rollout(db: &Database, seen: &Observed, rollout: Option<u32>, primary: &mut Primary) {
    if let Some(to) = rollout
        && to != primary.designated
    {
        // The rollout's own request: at the epoch in force, until
        // switchovers were refused too many times in a row.
        match refused_switchovers(db, seen) {
            refused if refused.len() >= MAX_REFUSED_SWITCHOVERS => {
                ignore_request(primary, rollout_gave_up(db, seen, to, &refused));
            }
            _ => consider_switchover(db, seen, Some((to, primary.epoch)), primary),
        }
    }
}

/// The switchover asked for by annotation: (instance, epoch). An
/// annotation that does not read as `<pod>@<epoch>` asks for nothing.
fn switchover_request(db: &Database) -> Option<(u32, u64)> {
    let value = db
        .metadata
        .annotations
        .as_ref()?
        .get(ANNOTATION_SWITCHOVER)?;
    let (pod, epoch) = value.trim().rsplit_once('@')?;
    Some((pod_ordinal(db, pod)?, epoch.parse().ok()?))
}

/// Starts a switchover asked for, when it is current and its instance is
/// a ready standby; says why not otherwise.
fn consider_switchover(
    db: &Database,
    seen: &Observed,
    request: Option<(u32, u64)>,
    primary: &mut Primary,
) {
    let Some((to, epoch)) = request else {
        return;
    };
    if to == primary.designated {
        return;
    }
    let ignored = if epoch != primary.epoch {
        format!(
            "it was asked at epoch {epoch} and the primary changed since (epoch {}); ask again with @{}",
            primary.epoch, primary.epoch
        )
    } else if !candidates(db, seen, primary.serving).any(|o| o == to) {
        format!("{} is not a ready standby", pod_name(db, to))
    } else {
        primary.designated = to;
        primary.epoch += 1;
        primary.step = Step::Fencing;
        primary.planned = true;
        return;
    };
    ignore_request(
        primary,
        format!(
            "switchover to {} not carried out: {ignored}",
            pod_name(db, to)
        ),
    );
}

/// Records why a switchover asked for is not carried out, after any
/// reason already recorded.
fn ignore_request(primary: &mut Primary, why: String) {
    primary.request_ignored = Some(match primary.request_ignored.take() {
        Some(before) => format!("{before}; {why}"),
        None => why,
    });
}

/// The designation in force: the newest of the role ConfigMap, the status
/// and the promote Jobs (the epoch only grows, whichever of them was lost).
/// At one epoch the role ConfigMap wins, then the status, then the Job
/// still running or succeeded.
fn designation(db: &Database, seen: &Observed, rec: &Recorded) -> (u32, u64) {
    let from_status = (rec.target.or(rec.current).unwrap_or(0), rec.epoch);
    let from_role = seen
        .role
        .as_ref()
        .and_then(|r| Some((pod_ordinal(db, &r.primary)?, r.epoch)));
    let from_jobs = promote_jobs(db, seen)
        .max_by_key(|(e, _, job)| (*e, seen.job(job) != Some(RunStatus::Failed)))
        .map(|(e, o, _)| (o, e));
    [from_jobs, Some(from_status), from_role]
        .into_iter()
        .flatten()
        .max_by_key(|(_, e)| *e)
        .unwrap_or((0, 0))
}

/// A change under way to the designated instance.
fn change(db: &Database, seen: &Observed, primary: &mut Primary) {
    let (designated, epoch) = (primary.designated, primary.epoch);
    let published = seen
        .role
        .as_ref()
        .is_some_and(|r| pod_ordinal(db, &r.primary) == Some(designated) && r.epoch == epoch);
    let job = promote_job(db, epoch, designated);
    match seen.job(&job) {
        // Fencing first: nothing is promoted before every instance that
        // starts reads the new primary's name.
        None if !published => primary.step = Step::Fencing,
        None if primary.serving.is_none() && !is_designated_ready(db, seen, primary) => {
            primary.step = Step::Starting;
        }
        None | Some(RunStatus::Running | RunStatus::None) => {
            primary.step = Step::Promoting;
            primary.promote_job = Some(job);
        }
        Some(RunStatus::Succeeded) => primary.serving = Some(designated),
        Some(RunStatus::Failed) => next_candidate(db, seen, primary),
    }
}

/// The designated standby's promote Job failed: the next ready standby at
/// the same epoch, or, when every refusal said the old primary still
/// answers as one, the old primary again at the next epoch (nothing was
/// promoted); else a person must look.
fn next_candidate(db: &Database, seen: &Observed, primary: &mut Primary) {
    let tried: Vec<u32> = promote_jobs(db, seen)
        .filter(|(e, _, _)| *e == primary.epoch)
        .map(|(_, o, _)| o)
        .collect();
    // A switchover is for one instance: it never moves on to another.
    let next = candidates(db, seen, primary.serving)
        .find(|o| !tried.contains(o))
        .filter(|_| !primary.planned);
    if let Some(next) = next {
        primary.designated = next;
        primary.step = Step::Fencing;
        return;
    }
    // Nothing was promoted when every Job refused (promote.sh refuses only
    // before pg_promote; its report says so). The old primary serves on
    // when the refusals say it answers as a primary, for a switchover for
    // any reason, and whatever they say once it is ready again (it came
    // back while the failover was under way: its data is the newest).
    let all_refused =
        !primary.refusals.is_empty() && primary.refusals.iter().all(|r| r.before_promoting);
    let old_primary_answers = all_refused
        && (primary.planned
            || primary.refusals.iter().all(|r| r.old_primary_answers)
            || primary
                .serving
                .is_some_and(|s| seen.is_instance_ready(db, s)));
    if let (true, Some(serving)) = (old_primary_answers, primary.serving) {
        primary.designated = serving;
        primary.epoch += 1;
        primary.step = Step::Steady;
        return;
    }
    primary.step = Step::Stuck;
}

/// The ready instances that may take over from `serving`, in order: of
/// those the size asks for, or that still run while a smaller size waits
/// (the primary lost as the size went down: its standbys still hold the
/// data, and the instances are kept up to the one promoted).
fn candidates(db: &Database, seen: &Observed, serving: Option<u32>) -> impl Iterator<Item = u32> {
    let running = u32::try_from(seen.statefulset_replicas()).unwrap_or(0);
    let mut ready: Vec<u32> = seen
        .instances(db)
        .filter(|(o, p)| Some(*o) != serving && *o < replicas(db).max(running) && p.is_ready())
        .map(|(o, _)| o)
        .collect();
    ready.sort_unstable();
    ready.dedup();
    ready.into_iter()
}

fn replicas(db: &Database) -> u32 {
    u32::try_from(db.spec.size.instances()).unwrap_or(0)
}

/// No change under way: starts one when the designated primary has been
/// not ready for longer than the delay and a standby is ready.
fn consider_failover(db: &Database, seen: &Observed, primary: &mut Primary) {
    let Some(pod) = seen
        .instances(db)
        .find(|(o, _)| *o == primary.designated)
        .map(|(_, p)| p)
    else {
        // No pod: the StatefulSet makes it again; its absence alone says
        // nothing of how long the primary has been gone.
        return;
    };
    let Some(since) = pod.not_ready_since() else {
        return;
    };
    // The delay counts from the designation too: a primary designated
    // again after a refused failover (it came back, restarted in place,
    // while the failover was under way) or just promoted was fenced, so
    // not ready, until then; it gets the whole delay to become ready,
    // else it would be failed over again at once on the time it was
    // fenced.
    let from = designated_at(db, seen, primary.epoch).map_or(since, |at| at.max(since));
    let delay = SignedDuration::from_secs(i64::from(delay_seconds(db)));
    let after = from.checked_add(delay).unwrap_or(from);
    if seen.now < after {
        primary.step = Step::Waiting { since, after };
        return;
    }
    match candidates(db, seen, Some(primary.designated)).next() {
        Some(next) => {
            primary.designated = next;
            primary.epoch += 1;
            primary.step = Step::Fencing;
        }
        None => primary.step = Step::NoCandidate { since },
    }
}

/// When the designation in force at `epoch` took effect, as observed:
/// the newest end of a promote Job up to that epoch (the one that promoted
/// it, or the last refused one before the old primary was designated
/// again). None at the first primary, or when no such Job says when.
fn designated_at(db: &Database, seen: &Observed, epoch: u64) -> Option<Timestamp> {
    promote_jobs(db, seen)
        .filter(|(e, _, _)| *e <= epoch)
        .filter_map(|(_, _, job)| seen.job_finished_at(job))
        .max()
}

/// `spec.failover.delay`, or its default.
pub(super) fn delay_seconds(db: &Database) -> u32 {
    db.spec
        .failover
        .as_ref()
        .and_then(|f| f.delay)
        .unwrap_or(DEFAULT_DELAY_SECONDS)
}

/// The newest promote Job that succeeded, when the status has not
/// recorded it yet: from the primary the status recorded.
fn last_failover(db: &Database, seen: &Observed, rec: &Recorded) -> Option<Failover> {
    let (epoch, to, job) = promote_jobs(db, seen)
        .filter(|(_, _, job)| seen.job(job) == Some(RunStatus::Succeeded))
        .max_by_key(|(e, _, _)| *e)?;
    if epoch <= rec.last_failover_epoch {
        return None;
    }
    Some(Failover {
        at: seen.job_completed_at(job),
        from: rec.current.filter(|c| *c != to),
        to,
        epoch,
        job: job.to_string(),
        // The Job says how it promoted, whoever asked for it.
        planned: seen.job_env(job, "MODE") == Some(SWITCHOVER_MODE),
    })
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::fixtures;
    pub(in super::super) use crate::fixtures::instance;
    use crate::operators::database::observed::Role;
    use crate::operators::database::spec::TEMPLATE_HASH;
    use serde_json::json;

    const NOW: &str = "2026-03-04T05:06:07Z";

    /// What `start.sh` leaves when the designated primary's volume is
    /// empty although the Database was initialized.
    pub(in super::super) const EMPTY_VOLUME: &str = "opshooks: the data directory /var/lib/postgresql/data/pg16 is empty although the Database was initialized: nothing is initialized over lost data; a standby must take over\n";

    /// A large Database with this status and a 30 s failover delay (the
    /// times in these tests are counted against it; it is not the
    /// default: [`default_delay_is_three_seconds`]).
    pub(in super::super) fn db(status: serde_json::Value) -> Database {
        fixtures::orders()
            .spec("size", "large")
            .spec("deletionPolicy", "Snapshot")
            .spec("failover", json!({"delay": 30}))
            .status(status)
            .typed()
    }

    /// Three instances: 0 not ready since `since` (ready if `None`), 1 and
    /// 2 ready; the role ConfigMap as given; these Jobs.
    fn seen(since: Option<&str>, role: Option<(&str, u64)>, jobs: &[fixtures::Object]) -> Observed {
        let first = match since {
            Some(at) => instance(0).not_ready_since(at),
            None => instance(0).ready(),
        };
        Observed {
            pods: vec![
                first.typed(),
                instance(1).ready().typed(),
                instance(2).ready().typed(),
            ],
            jobs: jobs
                .iter()
                .map(|j| {
                    let job: k8s_openapi::api::batch::v1::Job = j.clone().typed();
                    (job.metadata.name.clone().unwrap(), job)
                })
                .collect(),
            role: role.map(|(primary, epoch)| Role {
                primary: primary.to_string(),
                epoch,
                ..Role::default()
            }),
            ..Observed::default()
        }
        .at(NOW.parse().unwrap())
    }

    /// Instance `i`, not ready, its postgres container stopped with
    /// `message` (as `start.sh` leaves it).
    fn refusing(i: u32, message: &str) -> crate::hook::ObservedPod {
        instance(i)
            .not_ready_since("2026-03-04T05:00:00Z")
            .set(
                "/status/containerStatuses",
                json!([{"name": "postgres", "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                    "lastState": {"terminated": {"exitCode": 1, "message": message}}}]),
            )
            .typed()
    }

    /// A pod of promote Job `job` that stopped with `message` (exit 3).
    fn reported(job: &str, message: &str) -> crate::hook::ObservedPod {
        fixtures::pod(&format!("{job}-x"))
            .label("batch.kubernetes.io/job-name", job)
            .set(
                "/status/containerStatuses",
                json!([{"name": "promote", "state": {"terminated": {"exitCode": 3,
                    "message": format!("opshooks promote: {message}")}}}]),
            )
            .typed()
    }

    /// What start.sh reports, as the re-create test on real PostgreSQL
    /// (test_failover_scripts.py) saw it.
    fn holds(epoch: &str, primary: &str, timeline: u32, lsn: &str) -> String {
        format!(
            "opshooks: holds epoch={epoch} primary={primary} database=uid-earlier timeline={timeline} lsn={lsn}: this data saw epoch {epoch} (primary {primary}, Database uid-earlier), not before the role's epoch 0 (Database uid-now): the role was lost; not starting, rewinding or being rewound until the newest data is designated at a later epoch\n"
        )
    }

    /// Re-created: no status, the role ConfigMap names instance 0 at
    /// epoch 0, and each instance as given.
    fn re_created(pods: Vec<crate::hook::ObservedPod>) -> Primary {
        re_created_with_role(pods, "orders-0", 0)
    }

    /// Re-created (no status), the role ConfigMap naming `primary` at
    /// `epoch`, and each instance as given.
    fn re_created_with_role(
        pods: Vec<crate::hook::ObservedPod>,
        primary: &str,
        epoch: u64,
    ) -> Primary {
        let seen = Observed {
            pods,
            role: Some(Role {
                primary: primary.to_string(),
                epoch,
                initialized: true,
                switchover: false,
            }),
            ..Observed::default()
        }
        .at(NOW.parse().unwrap());
        decide(&db(json!({})), &seen, true, None)
    }

    #[test]
    fn re_created_after_a_failover_the_newest_data_is_designated_above_every_epoch() {
        let p = re_created(vec![
            refusing(0, &holds("1", "orders-0", 1, "0/4092650")),
            refusing(1, &holds("2", "orders-1", 2, "0/4166B38")),
            refusing(2, &holds("1", "orders-0", 2, "0/4166B38")),
        ]);
        assert_eq!((p.designated, p.epoch, p.serving), (1, 3, None), "{p:?}");
        assert_eq!(p.step, Step::Fencing);
        assert!(
            p.recovered
                .unwrap()
                .contains("orders-1 holds the newest data (epoch 2, timeline 2, WAL at 0/4166B38)")
        );
        // Instance 0 rejoined as a standby before: it says epoch 2 too,
        // and the primary's WAL is further.
        let p = re_created(vec![
            refusing(0, &holds("2", "orders-1", 2, "0/40F9ED8")),
            refusing(1, &holds("2", "orders-1", 2, "0/40FF4E8")),
            refusing(2, &holds("1", "orders-0", 2, "0/40FF4E8")),
        ]);
        assert_eq!((p.designated, p.epoch), (1, 3));
        // Instance 0's claim is gone: its empty volume is refused, the
        // others say what they hold.
        let p = re_created(vec![
            refusing(0, EMPTY_VOLUME),
            refusing(1, &holds("2", "orders-1", 2, "0/4195E70")),
            refusing(2, &holds("1", "orders-0", 1, "0/40A1AF8")),
        ]);
        assert_eq!((p.designated, p.epoch), (1, 3));
    }

    #[test]
    fn re_created_after_a_first_failover_the_epoch_0_records_of_the_earlier_database_count() {
        // Instance 0 never saw an epoch after 0 (its record is of the
        // earlier Database); orders-1 was promoted at epoch 1.
        let p = re_created(vec![
            refusing(0, &holds("0", "orders-0", 1, "0/4092650")),
            refusing(1, &holds("1", "orders-1", 2, "0/4166B38")),
            refusing(2, &holds("0", "orders-0", 2, "0/4166B38")),
        ]);
        assert_eq!((p.designated, p.epoch), (1, 2), "{p:?}");
        // Never failed over: the newest position wins, at epoch 1.
        let p = re_created(vec![
            refusing(0, &holds("0", "orders-0", 1, "0/5000000")),
            refusing(1, &holds("0", "orders-0", 1, "0/4FFFF00")),
            refusing(2, &holds("0", "orders-0", 1, "0/4FFFF00")),
        ]);
        assert_eq!((p.designated, p.epoch), (0, 1), "{p:?}");
    }

    #[test]
    fn re_created_nobody_new_is_designated_until_the_reports_settle_it() {
        let lost = |pods| match re_created(pods) {
            Primary {
                designated: 0,
                epoch: 0,
                step: Step::RoleLost(why),
                ..
            } => why,
            other => panic!("designated: {other:?}"),
        };
        // The primary at the highest epoch has not reported yet.
        let why = lost(vec![
            refusing(0, &holds("1", "orders-0", 1, "0/4092650")),
            instance(1).not_ready_since("2026-03-04T05:00:00Z").typed(),
            refusing(2, &holds("1", "orders-0", 2, "0/4166B38")),
        ]);
        assert!(
            why.contains("waiting for orders-1 to report what it holds"),
            "{why}"
        );
        // Two instances name different primaries at one epoch.
        let why = lost(vec![
            refusing(0, &holds("2", "orders-0", 2, "0/4092650")),
            refusing(1, &holds("2", "orders-1", 2, "0/4166B38")),
            refusing(2, &holds("1", "orders-0", 1, "0/4000000")),
        ]);
        assert!(
            why.contains("disagree who was primary at epoch 2: orders-0, orders-1"),
            "{why}"
        );
        // A report that does not read is trusted for nothing.
        let why = lost(vec![
            refusing(0, &holds("1", "orders-0", 1, "0/4092650")),
            refusing(1, &holds("2", "orders-1", 2, "?")),
            refusing(2, &holds("1", "orders-0", 2, "0/4166B38")),
        ]);
        assert!(why.contains("unreadable reports: orders-1"), "{why}");
        // The one named primary at the highest epoch must report.
        let why = lost(vec![
            refusing(0, &holds("1", "orders-0", 1, "0/4092650")),
            refusing(2, &holds("2", "orders-1", 2, "0/4166B38")),
        ]);
        assert!(
            why.contains("waiting for \"orders-1\", the primary at epoch 2"),
            "{why}"
        );
    }

    #[test]
    fn reports_no_later_than_the_records_change_nothing() {
        // Designated at epoch 3 from the reports: the role names orders-1
        // at 3, and the old reports stay in the pods' last state.
        let p = re_created_with_role(
            vec![
                refusing(0, &holds("1", "orders-0", 1, "0/4092650")),
                instance(1).ready().typed(),
                refusing(2, &holds("1", "orders-0", 2, "0/4166B38")),
            ],
            "orders-1",
            3,
        );
        assert_eq!((p.designated, p.epoch, p.recovered), (1, 3, None));
    }

    #[test]
    fn re_created_the_promote_job_waits_until_the_designated_instance_is_ready() {
        // The role names orders-1 at epoch 3 (designated from the
        // reports); nothing is known to serve, and orders-1 is still in
        // the back-off its reports earned: a Job now would find nothing
        // answering and refuse it.
        let at = |first: crate::hook::ObservedPod| {
            let pods = vec![
                refusing(0, &holds("1", "orders-0", 1, "0/4092650")),
                first,
                refusing(2, &holds("1", "orders-0", 2, "0/4166B38")),
            ];
            re_created_with_role(pods, "orders-1", 3)
        };
        let p = at(refusing(1, &holds("2", "orders-1", 2, "0/4166B38")));
        assert_eq!((p.designated, p.serving, p.step), (1, None, Step::Starting));
        assert_eq!(p.promote_job, None);
        // Started as the primary on its data: the Job confirms it.
        let p = at(instance(1).ready().typed());
        assert_eq!(p.step, Step::Promoting);
        assert_eq!(p.promote_job.as_deref(), Some("orders-promote-3-1"));
    }

    #[test]
    fn a_ready_primary_stays() {
        let p = decide(
            &db(json!({})),
            &seen(None, Some(("orders-0", 0)), &[]),
            true,
            None,
        );
        assert_eq!(
            (p.designated, p.epoch, p.serving, p.step),
            (0, 0, Some(0), Step::Steady)
        );
    }

    #[test]
    fn default_delay_is_three_seconds() {
        let mut d = db(json!({}));
        d.spec.failover = None;
        // 2 s not ready: waiting until 3 s; at 4 s a standby takes over.
        let at = |t: &str| seen(Some("2026-03-04T05:06:03Z"), None, &[]).at(t.parse().unwrap());
        let p = decide(&d, &at("2026-03-04T05:06:05Z"), true, None);
        assert_eq!(
            (p.designated, p.step),
            (
                0,
                Step::Waiting {
                    since: "2026-03-04T05:06:03Z".parse().unwrap(),
                    after: "2026-03-04T05:06:06Z".parse().unwrap()
                }
            )
        );
        let p = decide(&d, &at("2026-03-04T05:06:07Z"), true, None);
        assert_ne!(p.designated, 0, "{p:?}");
    }

    #[test]
    fn no_failover_within_the_delay() {
        // 20 s not ready, delay 30 s.
        let p = decide(
            &db(json!({})),
            &seen(Some("2026-03-04T05:05:47Z"), None, &[]),
            true,
            None,
        );
        assert_eq!(p.designated, 0);
        assert_eq!(
            p.step,
            Step::Waiting {
                since: "2026-03-04T05:05:47Z".parse().unwrap(),
                after: "2026-03-04T05:06:17Z".parse().unwrap()
            }
        );
    }

    #[test]
    fn past_the_delay_the_first_ready_standby_is_designated_and_fenced_first() {
        let p = decide(
            &db(json!({})),
            &seen(Some("2026-03-04T05:05:00Z"), None, &[]),
            true,
            None,
        );
        assert_eq!((p.designated, p.epoch, p.serving), (1, 1, Some(0)));
        assert_eq!(p.step, Step::Fencing);
        assert_eq!(
            p.promote_job, None,
            "nothing is promoted before the fence is read"
        );
    }

    #[test]
    fn nothing_fails_over_when_not_allowed() {
        let p = decide(
            &db(json!({})),
            &seen(Some("2026-03-04T05:00:00Z"), None, &[]),
            false,
            None,
        );
        assert_eq!((p.designated, p.step), (0, Step::Steady));
    }

    fn changing() -> Database {
        db(json!({"currentPrimary": "orders-0", "targetPrimary": "orders-1", "primaryEpoch": 1}))
    }

    #[test]
    fn once_the_role_names_the_candidate_its_promote_job_runs() {
        let p = decide(
            &changing(),
            &seen(Some("2026-03-04T05:00:00Z"), Some(("orders-1", 1)), &[]),
            true,
            None,
        );
        assert_eq!(p.step, Step::Promoting);
        assert_eq!(p.promote_job.as_deref(), Some("orders-promote-1-1"));
    }

    #[test]
    fn a_promote_job_that_succeeded_makes_the_candidate_the_primary() {
        let done = fixtures::job("orders-promote-1-1").succeeded();
        let p = decide(
            &changing(),
            &seen(Some("2026-03-04T05:00:00Z"), Some(("orders-1", 1)), &[done]),
            true,
            None,
        );
        assert_eq!((p.designated, p.serving, p.epoch), (1, Some(1), 1));
        assert!(!p.changing());
        let last = p.last.expect("the failover is reported");
        assert_eq!((last.from, last.to, last.epoch), (Some(0), 1, 1));
    }

    #[test]
    fn a_refused_candidate_gives_way_to_the_next_at_the_same_epoch() {
        let refused = fixtures::job("orders-promote-1-1").failed();
        let p = decide(
            &changing(),
            &seen(
                Some("2026-03-04T05:00:00Z"),
                Some(("orders-1", 1)),
                &[refused],
            ),
            true,
            None,
        );
        assert_eq!((p.designated, p.epoch, p.step), (2, 1, Step::Fencing));
    }

    #[test]
    fn when_every_candidate_failed_a_person_must_look() {
        let jobs = [
            fixtures::job("orders-promote-1-1").failed(),
            fixtures::job("orders-promote-1-2").failed(),
        ];
        let p = decide(
            &changing(),
            &seen(Some("2026-03-04T05:00:00Z"), Some(("orders-2", 1)), &jobs),
            true,
            None,
        );
        assert_eq!(p.step, Step::Stuck);
        assert_eq!(p.epoch, 1, "the epoch never goes back");
        assert_eq!(p.refusals.len(), 2);
    }

    #[test]
    fn the_epoch_survives_a_lost_status_and_role() {
        // Status and role ConfigMap gone; the promote Job remembers.
        let done = fixtures::job("orders-promote-3-2").succeeded();
        let p = decide(&db(json!({})), &seen(None, None, &[done]), true, None);
        assert_eq!((p.designated, p.epoch, p.serving), (2, 3, Some(2)));
    }

    #[test]
    fn an_older_role_never_wins_over_a_newer_status() {
        let status = json!({"currentPrimary": "orders-2", "primaryEpoch": 4});
        let p = decide(
            &db(status),
            &seen(None, Some(("orders-0", 0)), &[]),
            true,
            None,
        );
        assert_eq!((p.designated, p.epoch), (2, 4));
    }

    fn asking(switchover: &str, status: serde_json::Value) -> Database {
        let mut d = db(status);
        d.metadata.annotations =
            Some([(ANNOTATION_SWITCHOVER.to_string(), switchover.to_string())].into());
        d
    }

    #[test]
    fn a_current_switchover_request_designates_its_standby() {
        let d = asking("orders-2@0", json!({}));
        let p = decide(&d, &seen(None, Some(("orders-0", 0)), &[]), true, None);
        assert_eq!(
            (p.designated, p.epoch, p.serving, p.planned),
            (2, 1, Some(0), true)
        );
        assert_eq!(p.step, Step::Fencing);
        // Once the role names it, the Job runs in switchover mode.
        let d = asking(
            "orders-2@0",
            json!({"currentPrimary": "orders-0", "primaryEpoch": 1}),
        );
        let p = decide(&d, &seen(None, Some(("orders-2", 1)), &[]), true, None);
        assert_eq!((p.step, p.planned), (Step::Promoting, true));
        assert_eq!(p.promote_job.as_deref(), Some("orders-promote-1-2"));
    }

    /// A promote Job that runs in switchover mode.
    fn in_switchover_mode(job: fixtures::Object) -> fixtures::Object {
        job.set(
            "/spec",
            json!({"template": {"spec": {"containers": [{"name": "promote",
                "env": [{"name": "MODE", "value": "switchover"}]}]}}}),
        )
    }

    #[test]
    fn a_rollouts_switchover_is_reported_as_planned() {
        // No annotation: the rollout asked for it; its Job ran in
        // switchover mode, and that is what the report reads.
        let done = in_switchover_mode(fixtures::job("orders-promote-1-1").succeeded());
        let p = decide(
            &changing(),
            &seen(None, Some(("orders-1", 1)), &[done]),
            true,
            None,
        );
        let last = p.last.expect("the switchover is reported");
        assert_eq!((last.from, last.to, last.planned), (Some(0), 1, true));
    }

    #[test]
    fn a_switchover_stays_planned_before_its_job_exists() {
        // Designated for the rollout's switchover; before its Job is made
        // the old primary is lost and the rollout stops asking. The role
        // published says switchover: still one (found by database_lives:
        // it became a failover, skipping the delay, and moved the
        // read-write Service off the serving primary).
        let mut seen = seen(Some("2026-03-04T05:06:00Z"), Some(("orders-1", 1)), &[]);
        seen.role.as_mut().unwrap().switchover = true;
        let p = decide(&changing(), &seen, true, None);
        assert!(p.planned, "{p:?}");
        assert_eq!(p.promote_job.as_deref(), Some("orders-promote-1-1"));
        // Published without it: a failover, as before.
        seen.role.as_mut().unwrap().switchover = false;
        assert!(!decide(&changing(), &seen, true, None).planned);
    }

    #[test]
    fn a_switchover_stays_planned_once_its_job_runs() {
        // The rollout no longer asks (a standby above it not ready a
        // moment): the Job made in switchover mode keeps the change one,
        // so the old primary serves until it succeeded.
        let running = in_switchover_mode(fixtures::job("orders-promote-1-1"));
        let p = decide(
            &changing(),
            &seen(None, Some(("orders-1", 1)), &[running]),
            true,
            None,
        );
        assert_eq!(
            (p.step, p.planned, p.serving),
            (Step::Promoting, true, Some(0))
        );
    }

    #[test]
    fn a_stale_switchover_request_is_never_carried_out() {
        let d = asking(
            "orders-0@0",
            json!({"currentPrimary": "orders-1", "primaryEpoch": 1}),
        );
        let p = decide(&d, &seen(None, Some(("orders-1", 1)), &[]), true, None);
        assert_eq!((p.designated, p.epoch, p.step), (1, 1, Step::Steady));
        assert!(p.request_ignored.unwrap().contains("ask again with @1"));
    }

    #[test]
    fn a_refused_switchover_leaves_the_old_primary_serving() {
        let d = asking(
            "orders-2@0",
            json!({"currentPrimary": "orders-0", "primaryEpoch": 1}),
        );
        let refused = fixtures::job("orders-promote-1-2").failed();
        let mut s = seen(None, Some(("orders-2", 1)), &[refused]);
        s.pods.push(reported(
            "orders-promote-1-2",
            "refused orders-2 did not catch up in 60s",
        ));
        let p = decide(&d, &s, true, None);
        assert_eq!((p.designated, p.epoch, p.serving), (0, 2, Some(0)), "{p:?}");
        assert!(!p.changing());
    }

    /// docs/failover.md ("When"): a missing primary pod does not start
    /// the delay, however long it has been gone; the StatefulSet makes it
    /// again, and its new `Ready` condition does.
    #[test]
    fn a_missing_primary_pod_does_not_start_the_delay() {
        let mut s = seen(None, Some(("orders-0", 0)), &[]);
        s.pods
            .retain(|p| p.metadata.name.as_deref() != Some("orders-0"));
        let d = db(json!({"currentPrimary": "orders-0", "primaryEpoch": 0}));
        let p = decide(&d, &s, true, None);
        assert_eq!(
            (p.designated, p.epoch, p.step.clone()),
            (0, 0, Step::Steady),
            "{p:?}"
        );
    }

    /// A promote Job in switchover mode, failed, made under template `t`.
    fn refused_under(epoch: u64, t: &str) -> fixtures::Object {
        in_switchover_mode(fixtures::job(&format!("orders-promote-{epoch}-1")).failed())
            .annotation(TEMPLATE_HASH, t)
    }

    /// Observed: orders-0 designated at `epoch`, the StatefulSet last
    /// written with template `t`, these Jobs; the last refused one says
    /// why.
    fn rolling(epoch: u64, t: &str, jobs: &[fixtures::Object], last: Option<u64>) -> Observed {
        let mut s = seen(None, Some(("orders-0", epoch)), jobs);
        s.statefulset = Some(
            fixtures::statefulset("orders")
                .annotation(TEMPLATE_HASH, t)
                .typed(),
        );
        if let Some(e) = last {
            let job = format!("orders-promote-{e}-1");
            s.pods
                .push(reported(&job, "refused orders-1 does not verify"));
        }
        s
    }

    /// The rollout asks for a switchover to orders-1; `refused` of them
    /// were refused in a row under its template (at epochs 1, 3, 5, ...:
    /// each designated orders-0 again at the next), and orders-0 is
    /// designated now.
    fn after_refused_switchovers(refused: u64) -> Primary {
        let jobs: Vec<_> = (0..refused)
            .map(|i| refused_under(2 * i + 1, "t1"))
            .collect();
        let epoch = 2 * refused;
        let d = db(json!({"currentPrimary": "orders-0", "primaryEpoch": epoch}));
        let last = (refused > 0).then(|| 2 * refused - 1);
        decide(&d, &rolling(epoch, "t1", &jobs, last), true, Some(1))
    }

    /// Seen in a real loop (`dbrealtls` without the CA bundle): every
    /// switchover a rollout asked for was refused, and it asked again at
    /// once, 72 epochs and promote Jobs in 80 s.
    #[test]
    fn a_rollout_stops_asking_after_its_switchovers_were_refused_in_a_row() {
        for refused in 0..MAX_REFUSED_SWITCHOVERS as u64 {
            let p = after_refused_switchovers(refused);
            assert_eq!(
                (p.designated, p.step.clone(), p.planned),
                (1, Step::Fencing, true),
                "{refused}: {p:?}"
            );
        }
        let p = after_refused_switchovers(MAX_REFUSED_SWITCHOVERS as u64);
        assert_eq!(
            (p.designated, p.epoch, p.step.clone()),
            (0, 6, Step::Steady),
            "{p:?}"
        );
        let why = p.request_ignored.expect("it says why");
        assert!(why.contains("3 switchovers in a row were refused"), "{why}");
        assert!(
            why.contains("job orders-promote-5-1: refused orders-1 does not verify"),
            "{why}"
        );
        assert!(
            why.contains("opshooks.io/switchover: orders-1@<status.primaryEpoch>"),
            "{why}"
        );
        let jobs: Vec<_> = [1, 3, 5].iter().map(|e| refused_under(*e, "t1")).collect();
        // A new template (the one that mends the cause, perhaps): its
        // rollout asks again.
        let status = json!({"currentPrimary": "orders-0", "primaryEpoch": 6});
        let p = decide(
            &db(status.clone()),
            &rolling(6, "t2", &jobs, Some(5)),
            true,
            Some(1),
        );
        assert_eq!(
            (p.designated, p.epoch, p.step.clone()),
            (1, 7, Step::Fencing),
            "{p:?}"
        );
        // A person asks at the epoch in force: tried, whatever went before.
        let d = asking("orders-1@6", status);
        let p = decide(&d, &rolling(6, "t1", &jobs, Some(5)), true, Some(1));
        assert_eq!(
            (p.designated, p.epoch, p.step.clone()),
            (1, 7, Step::Fencing),
            "{p:?}"
        );
        // A switchover that succeeded since: the count starts again.
        let mut jobs = jobs;
        jobs.push(in_switchover_mode(
            fixtures::job("orders-promote-7-1").succeeded(),
        ));
        let p = decide(
            &db(json!({"currentPrimary": "orders-1", "primaryEpoch": 7})),
            &seen(None, Some(("orders-1", 7)), &jobs),
            true,
            Some(2),
        );
        assert_eq!((p.designated, p.step.clone()), (2, Step::Fencing), "{p:?}");
    }

    /// Found by `dbrealkill` in CI: the killed primary restarted in place
    /// while the failover was under way and served; every promote Job
    /// refused ("still answers as a primary") and orders-0 was designated
    /// again at epoch 2. It had been not ready since the fence (its probe
    /// fails while the role names another pod), so the next call failed it
    /// over again at once, to a standby by then too stale to promote:
    /// writes stayed down. The delay counts from the refusal.
    #[test]
    fn a_primary_designated_again_after_a_refused_failover_gets_the_whole_delay() {
        let finished_at = |job: &str, at: &str| {
            fixtures::job(job).set(
                "/status",
                json!({"conditions": [{"type": "Failed", "status": "True", "lastTransitionTime": at}]}),
            )
        };
        let refused = [
            finished_at("orders-promote-1-1", "2026-03-04T05:05:40Z"),
            finished_at("orders-promote-1-2", "2026-03-04T05:06:02Z"),
        ];
        let mut s = seen(
            Some("2026-03-04T05:05:00Z"),
            Some(("orders-2", 1)),
            &refused,
        );
        for job in ["orders-promote-1-1", "orders-promote-1-2"] {
            s.pods.push(reported(
                job,
                "refused old primary orders-0:5432 still answers as a primary after its lease ran out",
            ));
        }
        let p = decide(&changing(), &s, true, None);
        assert_eq!(
            (p.designated, p.epoch, p.step.clone()),
            (0, 2, Step::Steady)
        );

        // The next call: designated again at epoch 2, not ready yet.
        let again = db(json!({"currentPrimary": "orders-0", "primaryEpoch": 2}));
        s.role = Some(Role {
            primary: "orders-0".to_string(),
            epoch: 2,
            ..Role::default()
        });
        let p = decide(&again, &s, true, None);
        assert_eq!((p.designated, p.epoch), (0, 2), "{p:?}");
        assert_eq!(
            p.step,
            Step::Waiting {
                since: "2026-03-04T05:05:00Z".parse().unwrap(),
                after: "2026-03-04T05:06:32Z".parse().unwrap()
            }
        );

        // Still not ready a whole delay after the refusal: a failover.
        let later = s.at("2026-03-04T05:06:33Z".parse().unwrap());
        let p = decide(&again, &later, true, None);
        assert_eq!((p.designated, p.epoch, p.step), (1, 3, Step::Fencing));
    }

    /// The rest of the same CI run: the candidate at the next epoch was
    /// refused as stale (it had not streamed while the Service selected it),
    /// and the old primary was ready again, serving, but nothing designated
    /// it: Stuck with the read-write Service on a standby. Once every Job
    /// refused (nothing promoted), a ready old primary serves on.
    #[test]
    fn every_candidate_refused_and_the_old_primary_ready_again_it_serves_on() {
        let jobs = ["orders-promote-1-1", "orders-promote-1-2"];
        let mut s = seen(
            None,
            Some(("orders-2", 1)),
            &jobs.map(|job| fixtures::job(job).failed()),
        );
        for job in jobs {
            s.pods.push(reported(
                job,
                "refused candidate was last current with a primary 85s ago",
            ));
        }
        let p = decide(&changing(), &s, true, None);
        assert_eq!((p.designated, p.epoch, p.serving), (0, 2, Some(0)), "{p:?}");
        assert_eq!(p.step, Step::Steady);

        // Not ready: a person must look (nothing else may take over).
        s.pods[0] = instance(0).not_ready_since("2026-03-04T05:00:00Z").typed();
        let p = decide(&changing(), &s, true, None);
        assert_eq!((p.epoch, p.step.clone()), (1, Step::Stuck), "{p:?}");
    }
}
