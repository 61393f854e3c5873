//! A change of the instances' pod template (a new minor version of the
//! image, other resources) rolled out so that the primary never restarts
//! while it serves: the standbys update first, then a switchover moves the
//! primary to an updated standby, then the old primary updates, as a
//! standby.
//!
//! The StatefulSet's rolling update does the restarts, one pod at a time
//! from the highest ordinal down, and only for ordinals at or above its
//! `partition`. Holding the partition just above the serving primary lets
//! every standby above it update and keeps the primary on its revision. A
//! primary that is the highest ordinal first moves down (a switchover to a
//! standby on the old template), so that there is a standby above it.
//!
//! Everything is read from what is observed: the StatefulSet's update
//! revision (once its controller has seen the newest template) and the
//! revision each pod carries. A single instance restarts: there is nothing
//! to switch over to.

use super::observed::Observed;
use super::spec::{Database, REVISION_LABEL};

/// Where the rollout of the newest template stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Every instance runs the newest template, or nothing rolls (no
    /// standby, no StatefulSet, or an upgrade or restore holds the
    /// instances).
    Done,
    /// The StatefulSet controller has not reported on the newest template
    /// yet.
    Unknown,
    /// A change of primary is under way: nothing more updates until it is
    /// done.
    Paused,
    /// The standbys above the primary update: `updated` of `of`.
    Standbys {
        /// How many run the newest template.
        updated: u32,
        /// How many are to.
        of: u32,
    },
    /// The primary is the highest instance: it moves down to `to` first
    /// (a switchover), so that the standbys above it can update.
    MovePrimary {
        /// The standby to switch over to.
        to: u32,
    },
    /// Every standby above the primary runs the newest template: a
    /// switchover to `to`, one of them.
    Switchover {
        /// The standby to switch over to.
        to: u32,
    },
    /// The primary runs the newest template; the other instances, all
    /// standbys, update: `updated` of `of`.
    Rest {
        /// How many instances run the newest template.
        updated: u32,
        /// How many instances there are.
        of: u32,
    },
}

/// The rollout's decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rollout {
    /// Where it stands.
    pub step: Step,
    /// The StatefulSet's partition while its template is unchanged.
    pub partition: i32,
    /// The partition to write with a changed template: no instance at or
    /// below the serving primary takes it.
    pub hold: i32,
    /// The standby the rollout asks to switch over to, serving primary
    /// ready: asked while the change runs too (it is what makes the
    /// change a planned one).
    pub switchover: Option<u32>,
}

impl Rollout {
    /// Nothing rolls: partition 0, the StatefulSet's default.
    fn none() -> Self {
        Rollout {
            step: Step::Done,
            partition: 0,
            hold: 0,
            switchover: None,
        }
    }
}

/// The primary as the rollout sees it.
#[derive(Clone, Copy, Debug)]
pub(super) struct Serving {
    /// The instance serving as the primary, when known.
    pub ordinal: Option<u32>,
    /// A change of primary is under way.
    pub changing: bool,
}

impl Serving {
    /// No primary known: nothing rolls.
    pub(super) const UNKNOWN: Serving = Serving {
        ordinal: None,
        changing: false,
    };
}

/// Decides the partition and the switchover of a rollout. `replicas`: the
/// instances the StatefulSet runs; `active`: nothing else holds the
/// instances (no upgrade or restore) and the Database holds data.
pub(super) fn decide(
    db: &Database,
    seen: &Observed,
    replicas: i32,
    serving: Serving,
    active: bool,
) -> Rollout {
    let n = u32::try_from(replicas).unwrap_or(0);
    if !active || n <= 1 || seen.statefulset.is_none() {
        return Rollout::none();
    }
    let all = i32::try_from(n).unwrap_or(i32::MAX);
    let Some(p) = serving.ordinal.filter(|p| *p < n) else {
        // Which instance serves is not known: hold every instance.
        return Rollout {
            step: Step::Paused,
            partition: all,
            hold: all,
            switchover: None,
        };
    };
    let hold = i32::try_from(p.saturating_add(1)).map_or(all, |h| h.min(all));
    // During a change of primary the template stands still (every instance
    // is held) and only the partition is written: the revision last
    // reported still says whether the change is the rollout's switchover.
    let revision = match serving.changing {
        true => seen.last_update_revision(),
        false => seen.update_revision(),
    };
    let Some(revision) = revision else {
        let held = if serving.changing { all } else { hold };
        return Rollout {
            step: Step::Unknown,
            // Until the controller reports, the partition written stays
            // (never above the hold): writing the hold back over the 0 of
            // the last step would stop the old primary's update midway,
            // and it restarts once per flap.
            partition: seen.partition().map_or(held, |p| p.min(held)),
            hold: held,
            switchover: None,
        };
    };
    let pods = instances(db, seen, n, revision);
    let (_, _, primary_ready) = pods[p as usize];
    let (step, switchover) = next_step(&pods, p, n);
    let step = match (serving.changing, step) {
        // The rollout's own switchover is the change under way.
        (true, Step::Switchover { to }) if switchover == Some(to) => Step::Switchover { to },
        (true, step) if step != Step::Done => Step::Paused,
        (_, step) => step,
    };
    let partition = match (&step, serving.changing) {
        (_, true) => all,
        (Step::Rest { .. }, false) => 0,
        (_, false) => hold,
    };
    Rollout {
        step,
        partition,
        hold: if serving.changing { all } else { hold },
        // Only a primary that serves is switched over from: one that is not
        // ready is a failover's business.
        switchover: switchover.filter(|_| primary_ready),
    }
}

/// Each instance up to `n`, as (ordinal, runs `revision`, ready).
fn instances(db: &Database, seen: &Observed, n: u32, revision: &str) -> Vec<(u32, bool, bool)> {
    (0..n)
        .map(|o| {
            let pod = seen
                .instances(db)
                .find(|(i, _)| *i == o)
                .map(|(_, pod)| pod);
            let updated = pod
                .and_then(|pod| pod.metadata.labels.as_ref()?.get(REVISION_LABEL))
                .is_some_and(|r| r == revision);
            (o, updated, pod.is_some_and(|pod| pod.is_ready()))
        })
        .collect()
}

/// The rollout's next step from the instances (see [`instances`]) with
/// `p` the primary's ordinal, and the instance to switch over to, if any:
/// the standbys above the primary first, then a switchover to the lowest
/// of them, then the rest below it.
fn next_step(pods: &[(u32, bool, bool)], p: u32, n: u32) -> (Step, Option<u32>) {
    let (_, primary_updated, _) = pods[p as usize];
    let count = |from: u32| {
        pods.iter()
            .filter(|(o, updated, _)| *o >= from && *updated)
            .count()
    };
    let updated_all = u32::try_from(count(0)).unwrap_or(0);
    let above: Vec<&(u32, bool, bool)> = pods.iter().filter(|(o, _, _)| *o > p).collect();
    if primary_updated {
        let step = match updated_all == n {
            true => Step::Done,
            false => Step::Rest {
                updated: updated_all,
                of: n,
            },
        };
        (step, None)
    } else if above.is_empty() {
        let to = pods
            .iter()
            .find(|(o, _, ready)| *o != p && *ready)
            .map(|(o, _, _)| *o);
        match to {
            Some(to) => (Step::MovePrimary { to }, Some(to)),
            None => (Step::Standbys { updated: 0, of: 0 }, None),
        }
    } else if above.iter().all(|(_, updated, ready)| *updated && *ready) {
        let to = above[0].0;
        (Step::Switchover { to }, Some(to))
    } else {
        let of = u32::try_from(above.len()).unwrap_or(0);
        let updated = u32::try_from(count(p + 1)).unwrap_or(0);
        (Step::Standbys { updated, of }, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use serde_json::json;

    fn db() -> Database {
        fixtures::orders().spec("size", "large").typed()
    }

    /// Three instances; `updated[o]` says whether instance o runs the
    /// newest revision; all ready but those in `not_ready`.
    fn seen(updated: [bool; 3], not_ready: &[u32], fresh: bool) -> Observed {
        let observed_generation = if fresh { 2 } else { 1 };
        let sts = fixtures::statefulset("orders")
            .generation(2)
            .status(json!({"replicas": 3, "observedGeneration": observed_generation, "updateRevision": "new"}));
        let pods = (0..3u32)
            .map(|o| {
                let revision = if updated[o as usize] { "new" } else { "old" };
                fixtures::pod(&format!("orders-{o}"))
                    .label("app.kubernetes.io/name", "postgresql")
                    .label(REVISION_LABEL, revision)
                    .ready_if(!not_ready.contains(&o))
                    .typed()
            })
            .collect();
        Observed {
            statefulset: Some(sts.typed()),
            pods,
            ..Observed::default()
        }
    }

    fn at(p: u32) -> Serving {
        Serving {
            ordinal: Some(p),
            changing: false,
        }
    }

    /// Serving from `p` while a change of primary is under way.
    fn changing_from(p: u32) -> Serving {
        Serving {
            ordinal: Some(p),
            changing: true,
        }
    }

    #[test]
    fn the_standbys_above_the_primary_update_first() {
        let r = decide(
            &db(),
            &seen([false, true, false], &[], true),
            3,
            at(0),
            true,
        );
        assert_eq!(r.step, Step::Standbys { updated: 1, of: 2 });
        assert_eq!((r.partition, r.hold, r.switchover), (1, 1, None));
    }

    #[test]
    fn once_they_run_it_the_primary_switches_over_to_the_first() {
        let r = decide(&db(), &seen([false, true, true], &[], true), 3, at(0), true);
        assert_eq!(r.step, Step::Switchover { to: 1 });
        assert_eq!((r.partition, r.switchover), (1, Some(1)));
        // A standby above not ready: not yet.
        let r = decide(
            &db(),
            &seen([false, true, true], &[2], true),
            3,
            at(0),
            true,
        );
        assert_eq!(r.step, Step::Standbys { updated: 2, of: 2 });
        assert_eq!(r.switchover, None);
    }

    #[test]
    fn the_new_primary_running_it_the_rest_update() {
        let r = decide(&db(), &seen([false, true, true], &[], true), 3, at(1), true);
        assert_eq!(r.step, Step::Rest { updated: 2, of: 3 });
        assert_eq!((r.partition, r.hold, r.switchover), (0, 2, None));
        let r = decide(&db(), &seen([true, true, true], &[], true), 3, at(1), true);
        assert_eq!(r.step, Step::Done);
        assert_eq!((r.partition, r.hold), (2, 2));
    }

    #[test]
    fn a_primary_that_is_the_highest_moves_down_first() {
        let r = decide(
            &db(),
            &seen([false, false, false], &[], true),
            3,
            at(2),
            true,
        );
        assert_eq!(r.step, Step::MovePrimary { to: 0 });
        assert_eq!((r.partition, r.switchover), (3, Some(0)));
    }

    #[test]
    fn a_change_of_primary_pauses_it_but_keeps_asking_for_its_standby() {
        let serving = changing_from(0);
        let r = decide(
            &db(),
            &seen([false, true, true], &[], true),
            3,
            serving,
            true,
        );
        assert_eq!(r.step, Step::Switchover { to: 1 });
        assert_eq!((r.partition, r.hold, r.switchover), (3, 3, Some(1)));
        let r = decide(
            &db(),
            &seen([false, true, false], &[], true),
            3,
            serving,
            true,
        );
        assert_eq!(r.step, Step::Paused);
        assert_eq!((r.partition, r.switchover), (3, None));
    }

    #[test]
    fn its_switchover_stays_asked_while_the_statefulset_catches_up() {
        // The change's own partition write (every instance held) makes the
        // StatefulSet's status stale for a moment; the switchover under way
        // is still the rollout's (else its promote Job would run as a
        // failover and the read-write Service move before it succeeded).
        let serving = changing_from(0);
        let r = decide(
            &db(),
            &seen([false, true, true], &[], false),
            3,
            serving,
            true,
        );
        assert_eq!((r.partition, r.hold, r.switchover), (3, 3, Some(1)));
    }

    #[test]
    fn the_last_steps_partition_stays_until_the_statefulset_reports() {
        // Partition 0 just written (the old primary 0 updates, 1 serves):
        // the StatefulSet's status is stale for a moment.
        let mut s = seen([false, true, true], &[], false);
        let sts = s.statefulset.as_mut().unwrap();
        sts.spec.as_mut().unwrap().update_strategy = Some(
            serde_json::from_value(
                json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}),
            )
            .unwrap(),
        );
        let r = decide(&db(), &s, 3, at(1), true);
        assert_eq!((r.step, r.partition, r.hold), (Step::Unknown, 0, 2));
    }

    #[test]
    fn during_a_change_of_primary_every_instance_is_held() {
        let serving = changing_from(0);
        for fresh in [true, false] {
            let r = decide(
                &db(),
                &seen([true, true, true], &[], fresh),
                3,
                serving,
                true,
            );
            assert_eq!((r.partition, r.hold), (3, 3), "fresh {fresh}");
        }
    }

    #[test]
    fn a_primary_not_ready_is_never_switched_over_from() {
        let r = decide(
            &db(),
            &seen([false, true, true], &[0], true),
            3,
            at(0),
            true,
        );
        assert_eq!(r.switchover, None);
    }

    #[test]
    fn before_the_controller_saw_the_template_the_primary_is_held() {
        let r = decide(&db(), &seen([true, true, true], &[], false), 3, at(0), true);
        assert_eq!(r.step, Step::Unknown);
        assert_eq!((r.partition, r.switchover), (1, None));
    }

    #[test]
    fn nothing_rolls_for_one_instance_or_when_held() {
        let r = decide(&db(), &seen([false, true, true], &[], true), 1, at(0), true);
        assert_eq!(r, Rollout::none());
        let r = decide(
            &db(),
            &seen([false, true, true], &[], true),
            3,
            at(0),
            false,
        );
        assert_eq!(r, Rollout::none());
    }
}
