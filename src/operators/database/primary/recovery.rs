//! A Database re-created over retained volumes after a failover: the
//! records of who is primary (role ConfigMap, status, promote Jobs) may be
//! gone while the instances' data saw later epochs. Each such instance
//! refuses to start and reports what it holds (`start.sh`, read through
//! `operators::report`); this decides, from those reports alone, which
//! instance holds the newest data, or that it is not settled yet.

use super::super::names::{pod_name, pod_ordinal};
use super::super::observed::Observed;
use super::super::spec::Database;
use crate::hook::quote::quote;
use crate::operators::report::Holding;

/// What the instances' reports of what they hold ask for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Recovery {
    /// No instance holds data of a later epoch than `epoch`: the records
    /// stand.
    None,
    /// The role was lost: `ordinal` holds the newest data and is
    /// designated at `epoch`, above every one recorded.
    Designate {
        /// The instance holding the newest data.
        ordinal: u32,
        /// The epoch to designate it at.
        epoch: u64,
        /// Why, in words for the status.
        why: String,
    },
    /// The role was lost, and who holds the newest data is not settled.
    Unsettled(String),
}

/// Re-created over retained volumes after a failover, the records (role
/// ConfigMap, status, promote Jobs) may be gone while the instances' data
/// saw later epochs: each such instance refuses to start and reports what
/// it holds (`start.sh`). Once every instance the StatefulSet runs has
/// reported, is ready (it started on data no later than the records), or
/// refused an empty volume, and they agree who was primary at the highest
/// epoch (and that one reported), the instance holding the newest data
/// (highest epoch, then timeline, then WAL position; the lowest ordinal
/// of equals) is designated at the next epoch above every one recorded.
pub(super) fn recovery(db: &Database, seen: &Observed, epoch: u64) -> Recovery {
    let (ordinals, held, unreadable) = reports(db, seen);
    // Data of a later epoch, or of this epoch but another Database: the
    // records were lost (the Database was created again).
    let uid = db.metadata.uid.as_deref();
    let is_lost = |h: &Holding| {
        h.epoch.is_some_and(|e| {
            e > epoch || (e == epoch && h.database.is_some() && h.database.as_deref() != uid)
        })
    };
    if !held.iter().any(|(_, h)| is_lost(h)) {
        return Recovery::None;
    }
    let lost = |why: String| {
        Recovery::Unsettled(format!(
            "the role was lost (an instance holds data recorded after epoch {epoch}, or at it by an earlier Database of this name); nobody new is designated: {why}"
        ))
    };
    if !unreadable.is_empty() {
        return lost(format!("unreadable reports: {}", unreadable.join("; ")));
    }
    let silent: Vec<String> = ordinals
        .iter()
        .filter(|o| !held.iter().any(|(h, _)| h == *o))
        .filter(|o| !seen.is_instance_ready(db, **o))
        .filter(|o| !seen.has_empty_volume(db, **o))
        .map(|o| pod_name(db, *o))
        .collect();
    if !silent.is_empty() {
        return lost(format!(
            "waiting for {} to report what it holds",
            silent.join(", ")
        ));
    }
    let top = held
        .iter()
        .filter_map(|(_, h)| h.epoch)
        .max()
        .unwrap_or(epoch);
    let mut named: Vec<&str> = held
        .iter()
        .filter(|(_, h)| h.epoch == Some(top))
        .filter_map(|(_, h)| h.primary.as_deref())
        .collect();
    named.sort_unstable();
    named.dedup();
    let [at_top] = named[..] else {
        return lost(format!(
            "the instances disagree who was primary at epoch {top}: {}",
            named.join(", ")
        ));
    };
    let has_claim = |pod: &str| {
        pod_ordinal(db, pod)
            .is_some_and(|o| held.iter().any(|(h, _)| *h == o) || seen.has_empty_volume(db, o))
    };
    if !has_claim(at_top) {
        return lost(format!(
            "waiting for {}, the primary at epoch {top}, to report what it holds",
            quote(at_top)
        ));
    }
    designate(db, &held, epoch, top)
}

/// Every instance the StatefulSet runs or that is seen, what each reported
/// it holds, and the reports that could not be read (each in words).
fn reports(db: &Database, seen: &Observed) -> (Vec<u32>, Vec<(u32, Holding)>, Vec<String>) {
    let running = u32::try_from(seen.statefulset_replicas()).unwrap_or(0);
    let mut ordinals: Vec<u32> = (0..running)
        .chain(seen.instances(db).map(|(o, _)| o))
        .collect();
    ordinals.sort_unstable();
    ordinals.dedup();
    let mut held = Vec::new();
    let mut unreadable = Vec::new();
    for o in &ordinals {
        match seen.holding(db, *o) {
            Some(Ok(h)) => held.push((*o, h)),
            Some(Err(message)) => {
                unreadable.push(format!("{}: {}", pod_name(db, *o), quote(message)));
            }
            None => {}
        }
    }
    (ordinals, held, unreadable)
}

/// The instance holding the newest data (highest epoch, then timeline,
/// then WAL position; the lowest ordinal of equals), designated at the
/// epoch after `top` and every one recorded (`epoch`).
fn designate(db: &Database, held: &[(u32, Holding)], epoch: u64, top: u64) -> Recovery {
    let Some((ordinal, newest)) = held
        .iter()
        .max_by_key(|(o, h)| (h.epoch, h.timeline, h.lsn, std::cmp::Reverse(*o)))
    else {
        return Recovery::None;
    };
    let next = top.max(epoch) + 1;
    Recovery::Designate {
        ordinal: *ordinal,
        epoch: next,
        why: format!(
            "the role was lost (records at epoch {epoch}, data of epoch {top}); {} holds the newest data (epoch {top}, timeline {}, WAL at {:X}/{:X}) and is designated at epoch {next}",
            pod_name(db, *ordinal),
            newest.timeline,
            newest.lsn >> 32,
            newest.lsn & 0xFFFF_FFFF
        ),
    }
}
