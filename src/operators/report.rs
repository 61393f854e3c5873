//! What our scripts report back: the one line each writes to its
//! termination log (`$TERMINATION_LOG`, which Kubernetes shows in the pod's
//! status), and the one place the hook reads it.
//!
//! | script | line |
//! |---|---|
//! | `start.sh`, `tls.sh` | `opshooks: <words>`: why an instance will not start, or what `tls.sh` serves |
//! | `start.sh` | `opshooks: holds epoch=<e> primary=<pod> database=<uid> timeline=<t> lsn=<hi>/<lo>: <why>` |
//! | `promote.sh` | `opshooks promote: promoted <pod> lsn=<lsn>`, `… refused <why>`, `… failed <why>` |
//! | `select.sh`, `restore.sh` | `opshooks restore: restored bytes=<n> taken=<time> key=<key>`, or `opshooks restore: <why>` |
//! | `verify.sh` | `opshooks verify: verified tables=<n> rows=<n> seconds=<n> bytes=<n> taken=<time> key=<key>`, or `opshooks verify: <why>` |
//! | `mark.sh` | `opshooks mark: marked <marker>`, or `opshooks mark: <why>` |
//! | `pitr-fetch.sh` | `opshooks pitr-fetch: fetched id=<id> end=<lsn> end_time=<time> recoverable_from=<time> seconds=<n>`, or `… skipped\|refused\|failed <why>` |
//! | `pitr-replay.sh` | `opshooks pitr-replay: recovered lsn=<lsn> last_commit=<time> timeline=<n> ready_seconds=<n> seconds=<n>`, or `… refused\|failed <why>` |
//! | `base-backup.sh` | `opshooks base-backup: stored id=<id> from=<primary\|standby> begin=<lsn> end=<lsn> end_wal=<segment> end_time=<time> seconds=<n> [name=<name>] [already=true]`, or `… failed <why>` |
//! | `retain.sh` | `opshooks retain: kept=<n> deleted=<n> window_days=<n> oldest=<id> oldest_end=<time>`, or `… refused\|failed <why>` |
//!
//! A script writes its line as one line (newlines become spaces); `-`
//! stands for what it recorded none of; `key=` comes last, since a key may
//! hold anything. [`Report::parse`] reads every line above and
//! [`Report`]'s `Display` writes it back as the script does, so the unit
//! tests pin the grammar both ways, and the scripts' own tests
//! (`tests/scripts`) put every line a real script wrote through this parser
//! (`opshooks report`). Nothing here decides anything.

use std::fmt;

use serde::Serialize;

/// How a refusing instance's line begins (`start.sh`, `tls.sh`).
pub const INSTANCE: &str = "opshooks: ";
/// How a promote Job's line begins.
pub const PROMOTE: &str = "opshooks promote: ";
/// How a restore Job's lines begin (`select.sh` in a verification too).
pub const RESTORE: &str = "opshooks restore: ";
/// How `verify.sh`'s line begins.
pub const VERIFY: &str = "opshooks verify: ";
/// How `mark.sh`'s line begins.
pub const MARK: &str = "opshooks mark: ";
/// How `pitr-fetch.sh`'s line begins (a recovery's init container).
pub const PITR_FETCH: &str = "opshooks pitr-fetch: ";
/// How `pitr-replay.sh`'s line begins (run by `start.sh`, which passes a
/// failure on in its own refusal).
pub const PITR_REPLAY: &str = "opshooks pitr-replay: ";
/// How `base-backup.sh`'s line begins (in the archiver sidecar's log).
pub const BASE_BACKUP: &str = "opshooks base-backup: ";
/// How `retain.sh`'s line begins (a verification's archiver).
pub const RETAIN: &str = "opshooks retain: ";

/// How `start.sh`'s report of what an instance holds begins, after
/// [`INSTANCE`].
pub const HOLDS: &str = "holds ";
/// What `promote.sh` says when it refused because the old primary answers
/// as one: the old primary serves on.
pub const STILL_PRIMARY: &str = "still answers as a primary";
/// How `start.sh` begins a refusal to start beside another major's data.
pub const OTHER_MAJOR: &str = "volume holds ";
/// What `start.sh` says when the data directory is empty although the
/// Database was initialized.
pub const EMPTY_VOLUME: &str = "is empty although the Database was initialized";
/// What `start.sh` says when a recovery from another Database's archive
/// did not finish, or cannot begin.
pub const RECOVERY: &str = "from the archive ";

/// What an instance's words are about, by the phrases above.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum InstanceSays {
    /// The volume holds another major's data: nothing starts beside it.
    OtherMajor,
    /// The data directory is empty although the Database was initialized:
    /// nothing is initialized over lost data.
    EmptyVolume,
    /// A recovery from an archive did not finish or cannot begin.
    Recovery,
    /// Anything else.
    Other,
}

/// Which of the archive's scripts reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ArchiveScript {
    /// `pitr-fetch.sh`.
    PitrFetch,
    /// `pitr-replay.sh`.
    PitrReplay,
    /// `base-backup.sh`.
    BaseBackup,
    /// `retain.sh`.
    Retain,
}

/// Why an archive script did not do its work.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Verdict {
    /// Nothing for it to do here (exit 0): `pitr-fetch.sh` in any start
    /// but the designated primary's first.
    Skipped,
    /// It will not, as asked (exit 3): nothing was written.
    Refused,
    /// It tried and could not (exit 1).
    Failed,
}

impl Verdict {
    /// How the script writes it, before its reason.
    fn word(self) -> &'static str {
        match self {
            Verdict::Skipped => "skipped ",
            Verdict::Refused => "refused ",
            Verdict::Failed => "failed ",
        }
    }
}

impl ArchiveScript {
    fn prefix(self) -> &'static str {
        match self {
            ArchiveScript::PitrFetch => PITR_FETCH,
            ArchiveScript::PitrReplay => PITR_REPLAY,
            ArchiveScript::BaseBackup => BASE_BACKUP,
            ArchiveScript::Retain => RETAIN,
        }
    }

    /// The verdicts it reports.
    fn verdicts(self) -> &'static [Verdict] {
        const ALL: [Verdict; 3] = [Verdict::Skipped, Verdict::Refused, Verdict::Failed];
        match self {
            ArchiveScript::PitrFetch => &ALL,
            ArchiveScript::PitrReplay | ArchiveScript::Retain => &ALL[1..],
            ArchiveScript::BaseBackup => &ALL[2..],
        }
    }
}

/// One line a script reported.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(
    tag = "report",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
pub enum Report<'a> {
    /// An instance that will not start on its volume, saying what its data
    /// holds: it saw a later epoch than the role's, or is on a newer
    /// timeline than the primary's (`start.sh`).
    Holds {
        /// What the data holds.
        holding: Holding,
        /// Why it will not start.
        why: &'a str,
    },
    /// What an instance's container says otherwise: why it will not start
    /// (`start.sh`, or `tls.sh` when it fails) or which certificate it
    /// serves (`tls.sh` when it succeeds); the container's exit tells which.
    Instance {
        /// Its words.
        says: &'a str,
        /// What they are about.
        about: InstanceSays,
    },
    /// The promote Job promoted `pod`, which was at `lsn`.
    Promoted {
        /// The pod promoted.
        pod: &'a str,
        /// Its position when promoted, as PostgreSQL prints one.
        lsn: &'a str,
    },
    /// The promote Job refused before `pg_promote()`: nothing was promoted.
    PromoteRefused {
        /// Why.
        why: &'a str,
        /// Because the old primary still answers as a primary.
        old_primary_answers: bool,
    },
    /// The promote Job failed otherwise.
    PromoteFailed {
        /// Why.
        why: &'a str,
    },
    /// The restore Job restored a dump.
    Restored {
        /// The dump's size.
        bytes: Option<u64>,
        /// When the dump was taken, from its name.
        taken: Option<&'a str>,
        /// The object's key.
        key: &'a str,
    },
    /// A restore Job's step, or a verification's `select`, failed.
    RestoreFailed {
        /// Why.
        why: &'a str,
    },
    /// A verification restored a dump and checked it.
    Verified {
        /// Tables restored.
        tables: Option<u64>,
        /// Rows restored.
        rows: Option<u64>,
        /// How long the restore and the checks took.
        seconds: Option<u64>,
        /// The dump's size.
        bytes: Option<u64>,
        /// When the dump was taken, from its name.
        taken: Option<&'a str>,
        /// The object's key; empty when the line did not say.
        key: &'a str,
    },
    /// A verification failed.
    VerifyFailed {
        /// Why.
        why: &'a str,
    },
    /// What marking a dump verified did (`marked <marker>`) or why it
    /// failed; the container's exit tells which.
    Mark {
        /// Its words.
        says: &'a str,
    },
    /// `pitr-fetch.sh` downloaded a base backup to recover from.
    Fetched {
        /// The backup's id in the store.
        id: &'a str,
        /// Where it ends, as PostgreSQL prints an LSN.
        end: &'a str,
        /// When it ended.
        end_time: &'a str,
        /// The earliest point the archive recovers to: the end of its first
        /// finished base backup.
        recoverable_from: &'a str,
        /// How long the download took.
        seconds: Option<u64>,
    },
    /// `pitr-replay.sh` replayed the archive to the target and promoted.
    Recovered {
        /// The last WAL record replayed.
        lsn: &'a str,
        /// The time of the last transaction replayed, when one was.
        last_commit: Option<&'a str>,
        /// The new timeline.
        timeline: Option<u64>,
        /// Seconds until the server took writes.
        ready_seconds: Option<u64>,
        /// Seconds in all.
        seconds: Option<u64>,
    },
    /// `base-backup.sh` stored a base backup, or found it stored.
    BaseBackupStored {
        /// The backup's id in the store.
        id: &'a str,
        /// `primary` or `standby`: the server it was taken from.
        from: &'a str,
        /// Where it begins and ends, as PostgreSQL prints an LSN.
        begin: Option<&'a str>,
        /// Where it ends.
        end: &'a str,
        /// Its last WAL segment, which a recovery from it needs.
        end_wal: Option<&'a str>,
        /// When it ended.
        end_time: &'a str,
        /// How long it took.
        seconds: Option<u64>,
        /// The name the hook asked for, when it named it.
        name: Option<&'a str>,
        /// The store already had a finished backup of that name.
        already: bool,
    },
    /// `retain.sh` kept the recovery window and deleted what was older.
    Retained {
        /// Finished base backups left in the store.
        kept: Option<u64>,
        /// Finished base backups deleted.
        deleted: Option<u64>,
        /// The recovery window kept, in days.
        window_days: Option<u64>,
        /// The oldest base backup kept, when one is.
        oldest: Option<&'a str>,
        /// When it ended: the earliest point the archive recovers to.
        oldest_end: Option<&'a str>,
    },
    /// An archive script did not do its work, and why.
    ArchiveStep {
        /// Which.
        script: ArchiveScript,
        /// How it ended.
        verdict: Verdict,
        /// Why.
        why: &'a str,
    },
}

/// What a refusing instance reports its data holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Holding {
    /// The highest role epoch its data started under or was promoted at.
    pub epoch: Option<u64>,
    /// Who was primary at that epoch.
    pub primary: Option<String>,
    /// The uid of the Database whose role it recorded.
    pub database: Option<String>,
    /// The newest timeline of its WAL.
    pub timeline: u64,
    /// The start of the last WAL record it holds on that timeline.
    pub lsn: u64,
}

/// A line that is not one of the reports above: `words` is what followed
/// a known beginning, if it had one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unreadable<'a> {
    /// The line's beginning, when it is one of ours.
    pub prefix: Option<&'static str>,
    /// What follows it (trimmed), or the whole line.
    pub words: &'a str,
}

impl fmt::Display for Unreadable<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.prefix {
            Some(prefix) => write!(
                f,
                "a report beginning {prefix:?} that does not read: {:?}",
                self.words
            ),
            None => write!(f, "not a report of an opshooks script: {:?}", self.words),
        }
    }
}

/// The `name=value` fields of `fields`.
fn field<'a>(fields: &'a str, name: &str) -> Option<&'a str> {
    fields
        .split_whitespace()
        .find_map(|f| f.strip_prefix(name)?.strip_prefix('='))
}

/// A number field; `None` when absent or not a number.
fn number(fields: &str, name: &str) -> Option<u64> {
    field(fields, name).and_then(|n| n.parse().ok())
}

impl Holding {
    /// `epoch=<e> primary=<pod> database=<uid> timeline=<t> lsn=<hi>/<lo>`:
    /// all but `database` required.
    fn parse(fields: &str) -> Option<Self> {
        let known = |v: &str| (v != "-").then(|| v.to_string());
        let epoch = match field(fields, "epoch")? {
            "-" => None,
            e => Some(e.parse().ok()?),
        };
        let (hi, lo) = field(fields, "lsn")?.split_once('/')?;
        let lsn = u64::from_str_radix(hi, 16).ok()? << 32 | u64::from_str_radix(lo, 16).ok()?;
        Some(Holding {
            epoch,
            primary: known(field(fields, "primary")?),
            database: field(fields, "database").and_then(known),
            timeline: field(fields, "timeline")?.parse().ok()?,
            lsn,
        })
    }
}

impl<'a> Report<'a> {
    /// Reads one line (a trailing newline and spaces are left out).
    pub fn parse(message: &'a str) -> Result<Self, Unreadable<'a>> {
        let line = message.trim_end();
        let (prefix, words) = [
            PROMOTE,
            RESTORE,
            VERIFY,
            MARK,
            PITR_FETCH,
            PITR_REPLAY,
            BASE_BACKUP,
            RETAIN,
            INSTANCE,
        ]
        .into_iter()
        .find_map(|p| Some((p, line.strip_prefix(p)?)))
        .ok_or(Unreadable {
            prefix: None,
            words: line,
        })?;
        let unreadable = Unreadable {
            prefix: Some(prefix),
            words: words.trim(),
        };
        let report = match prefix {
            INSTANCE => Self::instance(words),
            PROMOTE => Self::promote(words),
            RESTORE => Self::restore(words),
            VERIFY => Some(Self::verify(words)),
            MARK => Some(Report::Mark { says: words.trim() }),
            PITR_FETCH => Self::archive(ArchiveScript::PitrFetch, words, "fetched ", Self::fetched),
            PITR_REPLAY => Self::archive(
                ArchiveScript::PitrReplay,
                words,
                "recovered ",
                Self::recovered,
            ),
            RETAIN => Self::archive(ArchiveScript::Retain, words, "kept=", Self::retained),
            _ => Self::archive(ArchiveScript::BaseBackup, words, "stored ", Self::stored),
        };
        report.ok_or(unreadable)
    }

    /// `start.sh`'s and `tls.sh`'s words.
    fn instance(words: &'a str) -> Option<Self> {
        if let Some(rest) = words.strip_prefix(HOLDS) {
            let (fields, why) = rest.split_once(':')?;
            return Some(Report::Holds {
                holding: Holding::parse(fields)?,
                why: why.trim(),
            });
        }
        let says = words.trim();
        let about = if says.starts_with(OTHER_MAJOR) {
            InstanceSays::OtherMajor
        } else if says.contains(EMPTY_VOLUME) {
            InstanceSays::EmptyVolume
        } else if says.contains(RECOVERY) {
            InstanceSays::Recovery
        } else {
            InstanceSays::Other
        };
        Some(Report::Instance { says, about })
    }

    /// `promote.sh`'s words.
    fn promote(words: &'a str) -> Option<Self> {
        if let Some(why) = words.strip_prefix("refused ") {
            return Some(Report::PromoteRefused {
                why: why.trim(),
                old_primary_answers: why.contains(STILL_PRIMARY),
            });
        }
        if let Some(why) = words.strip_prefix("failed ") {
            return Some(Report::PromoteFailed { why: why.trim() });
        }
        let (pod, lsn) = words.strip_prefix("promoted ")?.split_once(" lsn=")?;
        Some(Report::Promoted {
            pod: pod.trim(),
            lsn: lsn.trim(),
        })
    }

    /// `select.sh`'s and `restore.sh`'s words.
    fn restore(words: &'a str) -> Option<Self> {
        let Some(rest) = words.strip_prefix("restored ") else {
            return Some(Report::RestoreFailed { why: words.trim() });
        };
        let (fields, key) = rest.split_once("key=")?;
        Some(Report::Restored {
            bytes: number(fields, "bytes"),
            taken: field(fields, "taken"),
            key,
        })
    }

    /// `verify.sh`'s words.
    fn verify(words: &'a str) -> Self {
        let Some(rest) = words.strip_prefix("verified ") else {
            return Report::VerifyFailed { why: words.trim() };
        };
        let (fields, key) = rest.split_once("key=").unwrap_or((rest, ""));
        Report::Verified {
            tables: number(fields, "tables"),
            rows: number(fields, "rows"),
            seconds: number(fields, "seconds"),
            bytes: number(fields, "bytes"),
            taken: field(fields, "taken"),
            key,
        }
    }

    /// An archive script's words: its success (`done`, read by `read`) or
    /// one of its verdicts.
    fn archive(
        script: ArchiveScript,
        words: &'a str,
        done: &str,
        read: fn(&'a str) -> Option<Self>,
    ) -> Option<Self> {
        if let Some(fields) = words.strip_prefix(done) {
            return read(fields);
        }
        script.verdicts().iter().find_map(|verdict| {
            Some(Report::ArchiveStep {
                script,
                verdict: *verdict,
                why: words.strip_prefix(verdict.word())?.trim(),
            })
        })
    }

    /// `pitr-fetch.sh`'s fields.
    fn fetched(fields: &'a str) -> Option<Self> {
        Some(Report::Fetched {
            id: field(fields, "id")?,
            end: field(fields, "end")?,
            end_time: field(fields, "end_time")?,
            recoverable_from: field(fields, "recoverable_from")?,
            seconds: number(fields, "seconds"),
        })
    }

    /// `pitr-replay.sh`'s fields.
    fn recovered(fields: &'a str) -> Option<Self> {
        Some(Report::Recovered {
            lsn: field(fields, "lsn")?,
            last_commit: field(fields, "last_commit").filter(|t| *t != "-"),
            timeline: number(fields, "timeline"),
            ready_seconds: number(fields, "ready_seconds"),
            seconds: number(fields, "seconds"),
        })
    }

    /// `base-backup.sh`'s fields.
    fn stored(fields: &'a str) -> Option<Self> {
        Some(Report::BaseBackupStored {
            id: field(fields, "id")?,
            from: field(fields, "from").filter(|f| ["primary", "standby"].contains(f))?,
            begin: field(fields, "begin"),
            end: field(fields, "end")?,
            end_wal: field(fields, "end_wal"),
            end_time: field(fields, "end_time")?,
            seconds: number(fields, "seconds"),
            name: field(fields, "name"),
            already: field(fields, "already") == Some("true"),
        })
    }

    /// `retain.sh`'s fields (after `kept=`).
    fn retained(fields: &'a str) -> Option<Self> {
        let (kept, fields) = fields.split_once(' ')?;
        Some(Report::Retained {
            kept: Some(kept.parse().ok()?),
            deleted: number(fields, "deleted"),
            window_days: number(fields, "window_days"),
            oldest: field(fields, "oldest").filter(|o| *o != "-"),
            oldest_end: field(fields, "oldest_end").filter(|o| *o != "-"),
        })
    }

    /// How the line begins.
    pub fn prefix(&self) -> &'static str {
        match self {
            Report::Holds { .. } | Report::Instance { .. } => INSTANCE,
            Report::Promoted { .. }
            | Report::PromoteRefused { .. }
            | Report::PromoteFailed { .. } => PROMOTE,
            Report::Restored { .. } | Report::RestoreFailed { .. } => RESTORE,
            Report::Verified { .. } | Report::VerifyFailed { .. } => VERIFY,
            Report::Mark { .. } => MARK,
            Report::Fetched { .. } => PITR_FETCH,
            Report::Recovered { .. } => PITR_REPLAY,
            Report::BaseBackupStored { .. } => BASE_BACKUP,
            Report::Retained { .. } => RETAIN,
            Report::ArchiveStep { script, .. } => script.prefix(),
        }
    }

    /// What follows the beginning, as the script writes it.
    pub fn words(&self) -> String {
        match self {
            Report::Holds { holding: h, why } => format!(
                "holds epoch={} primary={} database={} timeline={} lsn={:X}/{:X}: {why}",
                dash(h.epoch),
                h.primary.as_deref().unwrap_or("-"),
                h.database.as_deref().unwrap_or("-"),
                h.timeline,
                h.lsn >> 32,
                h.lsn & 0xFFFF_FFFF,
            ),
            Report::Promoted { pod, lsn } => format!("promoted {pod} lsn={lsn}"),
            Report::PromoteRefused { why, .. } => format!("refused {why}"),
            Report::PromoteFailed { why } => format!("failed {why}"),
            Report::Restored { bytes, taken, key } => format!(
                "restored bytes={} taken={} key={key}",
                dash(*bytes),
                taken.unwrap_or("-")
            ),
            Report::Verified {
                tables,
                rows,
                seconds,
                bytes,
                taken,
                key,
            } => format!(
                "verified tables={} rows={} seconds={} bytes={} taken={} key={key}",
                dash(*tables),
                dash(*rows),
                dash(*seconds),
                dash(*bytes),
                taken.unwrap_or("-")
            ),
            Report::Fetched { .. }
            | Report::Recovered { .. }
            | Report::BaseBackupStored { .. }
            | Report::Retained { .. } => self.archive_words().unwrap_or_default(),
            Report::ArchiveStep { verdict, why, .. } => format!("{}{why}", verdict.word()),
            Report::RestoreFailed { why } | Report::VerifyFailed { why } => why.to_string(),
            Report::Instance { says, .. } | Report::Mark { says } => says.to_string(),
        }
    }

    /// The words of the archive's lines (`pitr-fetch.sh`, `pitr-replay.sh`,
    /// `base-backup.sh`, `retain.sh`); `None` for the others.
    fn archive_words(&self) -> Option<String> {
        let words = match self {
            Report::Fetched {
                id,
                end,
                end_time,
                recoverable_from,
                seconds,
            } => format!(
                "fetched id={id} end={end} end_time={end_time} recoverable_from={recoverable_from} seconds={}",
                dash(*seconds)
            ),
            Report::Recovered {
                lsn,
                last_commit,
                timeline,
                ready_seconds,
                seconds,
            } => format!(
                "recovered lsn={lsn} last_commit={} timeline={} ready_seconds={} seconds={}",
                last_commit.unwrap_or("-"),
                dash(*timeline),
                dash(*ready_seconds),
                dash(*seconds)
            ),
            Report::BaseBackupStored {
                id,
                from,
                begin,
                end,
                end_wal,
                end_time,
                seconds,
                name,
                already,
            } => {
                let mut words = format!(
                    "stored id={id} from={from} begin={} end={end} end_wal={} end_time={end_time} seconds={}",
                    begin.unwrap_or("-"),
                    end_wal.unwrap_or("-"),
                    dash(*seconds)
                );
                if let Some(name) = name {
                    words.push_str(&format!(" name={name}"));
                }
                if *already {
                    words.push_str(" already=true");
                }
                words
            }
            Report::Retained {
                kept,
                deleted,
                window_days,
                oldest,
                oldest_end,
            } => format!(
                "kept={} deleted={} window_days={} oldest={} oldest_end={}",
                dash(*kept),
                dash(*deleted),
                dash(*window_days),
                oldest.unwrap_or("-"),
                oldest_end.unwrap_or("-")
            ),
            _ => return None,
        };
        Some(words)
    }
}

/// A number a line may lack, as the scripts write it: `-` when absent.
fn dash(value: Option<u64>) -> String {
    value.map_or_else(|| "-".to_string(), |n| n.to_string())
}

impl fmt::Display for Report<'_> {
    /// The line as the script writes it, without its newline.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.prefix(), self.words())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines as the scripts write them, each read and written back as it
    /// was.
    const LINES: [&str; 27] = [
        "opshooks: the volume holds PostgreSQL 15's data and this instance runs 16",
        "opshooks: holds epoch=4 primary=orders-1 database=0b9f timeline=3 lsn=0/3000148: the role names orders-0 at epoch 3",
        "opshooks: holds epoch=- primary=- database=- timeline=1 lsn=1A/FF000028: no role recorded",
        "opshooks promote: promoted orders-1 lsn=0/5000060",
        "opshooks promote: refused old primary orders-0:5432 still answers as a primary",
        "opshooks promote: failed pg_promote() did not finish in 60 s",
        "opshooks restore: restored bytes=1234 taken=2026-03-04T05:06:07Z key=db/orders-20260304T050607Z.pgdump",
        "opshooks restore: no dump under s3://bucket/db/ names orders",
        "opshooks verify: verified tables=3 rows=7 seconds=2 bytes=1234 taken=2026-03-04T05:06:07Z key=db/a b=c.pgdump",
        "opshooks verify: the dump did not restore: pg_restore exited 1",
        "opshooks mark: the store refused the tag: AccessDenied",
        "opshooks restore: restored bytes=- taken=- key=k",
        "opshooks: serving the certificate of the TLS Secret (mounted at /etc/opshooks/tls)",
        "opshooks mark: marked s3://bucket/db/a.pgdump.verified",
        "opshooks pitr-fetch: fetched id=20261206T010203 end=0/5000100 end_time=2026-12-06T01:02:04.5+00:00 recoverable_from=2026-12-05T01:02:04+00:00 seconds=1",
        "opshooks pitr-fetch: skipped 'orders-1' is not the designated primary",
        "opshooks pitr-fetch: refused the target, time 2020-01-01T00:00:00Z, is before the end of the first base backup: the archive recovers from 2026-12-05T01:02:04+00:00",
        "opshooks pitr-fetch: failed barman-cloud-restore of backup 20261206T010203: connection refused",
        "opshooks pitr-replay: recovered lsn=0/7000060 last_commit=2026-12-06T01:05:00.123+00:00 timeline=2 ready_seconds=7 seconds=9",
        "opshooks pitr-replay: recovered lsn=0/7000060 last_commit=- timeline=2 ready_seconds=7 seconds=9",
        "opshooks pitr-replay: refused no data directory in '/d': pitr-fetch.sh runs first",
        "opshooks base-backup: stored id=20261206T010203 from=standby begin=0/4000028 end=0/5000100 end_wal=000000010000000000000005 end_time=2026-12-06T01:02:04+00:00 seconds=3 name=scheduled-20261206T0100Z already=true",
        "opshooks base-backup: failed cannot reach the store",
        "opshooks retain: kept=3 deleted=1 window_days=14 oldest=20261120T010002 oldest_end=2026-11-20T01:00:09.5+00:00",
        "opshooks retain: kept=0 deleted=0 window_days=14 oldest=- oldest_end=-",
        "opshooks retain: refused the replay did not prove the newest base backup (it ended with '1'): nothing is deleted before a newer backup is proven",
        "opshooks retain: failed barman-cloud-backup-delete: AccessDenied",
    ];

    #[test]
    fn every_line_reads_and_writes_back_as_the_script_wrote_it() {
        for line in LINES {
            let report = Report::parse(line).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(report.to_string(), line);
            // A trailing newline, as the scripts end the file, is no part
            // of it.
            assert_eq!(Report::parse(&format!("{line}\n")), Ok(report));
        }
    }

    #[test]
    fn fields_read_as_typed_values() {
        let holds = Report::parse(LINES[2]).unwrap();
        let Report::Holds { holding, why } = holds else {
            panic!("{holds:?}")
        };
        assert_eq!(
            holding,
            Holding {
                epoch: None,
                primary: None,
                database: None,
                timeline: 1,
                lsn: 0x1A_FF00_0028
            }
        );
        assert_eq!(why, "no role recorded");
        assert_eq!(
            Report::parse(LINES[8]).unwrap(),
            Report::Verified {
                tables: Some(3),
                rows: Some(7),
                seconds: Some(2),
                bytes: Some(1234),
                taken: Some("2026-03-04T05:06:07Z"),
                key: "db/a b=c.pgdump",
            }
        );
        assert_eq!(
            Report::parse(LINES[4]).unwrap(),
            Report::PromoteRefused {
                why: "old primary orders-0:5432 still answers as a primary",
                old_primary_answers: true,
            }
        );
        let about = |line: &str| match Report::parse(line) {
            Ok(Report::Instance { about, .. }) => about,
            other => panic!("{other:?}"),
        };
        assert_eq!(about(LINES[0]), InstanceSays::Other);
        assert_eq!(
            about(
                "opshooks: volume holds PostgreSQL 16 data (pg16), not 15: nothing is initialized or served beside it"
            ),
            InstanceSays::OtherMajor
        );
        assert_eq!(
            about(
                "opshooks: the data directory /d/pg16 is empty although the Database was initialized: nothing is initialized over lost data; a standby must take over"
            ),
            InstanceSays::EmptyVolume
        );
    }

    /// The scripts write the phrases the hook reads: each side had its own
    /// copy once, pinned by its own tests only. (The scripts' tests put
    /// their real lines through this parser too: `opshooks report`.)
    #[test]
    fn the_scripts_write_the_phrases_the_hook_reads() {
        use crate::operators::database::PROMOTE_SCRIPT;
        use crate::operators::database::instances::START_SCRIPT;
        assert!(
            PROMOTE_SCRIPT.contains("report \"refused $1\""),
            "promote.sh's refuse() no longer reports \"refused <reason>\""
        );
        let still = PROMOTE_SCRIPT
            .lines()
            .filter(|l| l.contains("refuse \"old primary $old ") && l.contains(STILL_PRIMARY))
            .count();
        assert_eq!(
            still, 3,
            "promote.sh's refusals for an old primary that answers"
        );
        let refusals = |phrase: &str| {
            START_SCRIPT
                .lines()
                .filter(|l| {
                    l.trim_start().starts_with("true) refuse \"")
                        || l.trim_start().starts_with("refuse \"")
                })
                .filter(|l| l.contains(phrase))
                .count()
        };
        assert_eq!(
            refusals(EMPTY_VOLUME),
            2,
            "start.sh's refusals over an empty volume"
        );
        assert_eq!(
            refusals(&format!("refuse \"{OTHER_MAJOR}")),
            1,
            "start.sh's refusal beside another major"
        );
        assert_eq!(
            refusals(RECOVERY),
            2,
            "start.sh's refusals of a recovery from the archive"
        );
        assert!(
            START_SCRIPT
                .lines()
                .filter(|l| l.trim_start().starts_with("refuse \"") && l.contains(RECOVERY))
                .all(|l| !l.contains(EMPTY_VOLUME) && !l.contains(OTHER_MAJOR)),
            "a recovery's refusal reads as about another thing"
        );
    }

    #[test]
    fn the_archive_scripts_lines_read_as_typed_values() {
        assert_eq!(
            Report::parse(LINES[14]).unwrap(),
            Report::Fetched {
                id: "20261206T010203",
                end: "0/5000100",
                end_time: "2026-12-06T01:02:04.5+00:00",
                recoverable_from: "2026-12-05T01:02:04+00:00",
                seconds: Some(1),
            }
        );
        for (line, want) in [
            (LINES[15], (ArchiveScript::PitrFetch, Verdict::Skipped)),
            (LINES[16], (ArchiveScript::PitrFetch, Verdict::Refused)),
            (LINES[20], (ArchiveScript::PitrReplay, Verdict::Refused)),
            (LINES[22], (ArchiveScript::BaseBackup, Verdict::Failed)),
        ] {
            match Report::parse(line) {
                Ok(Report::ArchiveStep {
                    script, verdict, ..
                }) => assert_eq!((script, verdict), want, "{line}"),
                other => panic!("{line}: {other:?}"),
            }
        }
        assert_eq!(
            Report::parse(LINES[19]).unwrap(),
            Report::Recovered {
                lsn: "0/7000060",
                last_commit: None,
                timeline: Some(2),
                ready_seconds: Some(7),
                seconds: Some(9),
            }
        );
        let Ok(Report::BaseBackupStored {
            from,
            name,
            already,
            ..
        }) = Report::parse(LINES[21])
        else {
            panic!("{LINES:?}")
        };
        assert_eq!(
            (from, name, already),
            ("standby", Some("scheduled-20261206T0100Z"), true)
        );
    }

    #[test]
    fn a_line_that_does_not_read_says_so_with_its_words() {
        for (line, prefix, words) in [
            (
                "opshooks: holds epoch=x timeline=1 lsn=0/1: y",
                Some(INSTANCE),
                "holds epoch=x timeline=1 lsn=0/1: y",
            ),
            (
                "opshooks: holds epoch=1 primary=a timeline=1 lsn=0/1",
                Some(INSTANCE),
                "holds epoch=1 primary=a timeline=1 lsn=0/1",
            ),
            ("opshooks promote: began", Some(PROMOTE), "began"),
            (
                "opshooks promote: promoted orders-1",
                Some(PROMOTE),
                "promoted orders-1",
            ),
            (
                "opshooks restore: restored bytes=1",
                Some(RESTORE),
                "restored bytes=1",
            ),
            (
                "opshooks pitr-fetch: fetched id=1",
                Some(PITR_FETCH),
                "fetched id=1",
            ),
            // base-backup.sh never skips or refuses; pitr-replay.sh never
            // skips.
            (
                "opshooks base-backup: skipped now",
                Some(BASE_BACKUP),
                "skipped now",
            ),
            (
                "opshooks pitr-replay: skipped now",
                Some(PITR_REPLAY),
                "skipped now",
            ),
            (
                "opshooks base-backup: stored id=1 from=nowhere end=0/1 end_time=t",
                Some(BASE_BACKUP),
                "stored id=1 from=nowhere end=0/1 end_time=t",
            ),
            ("psql: could not connect", None, "psql: could not connect"),
            ("", None, ""),
        ] {
            assert_eq!(
                Report::parse(line),
                Err(Unreadable { prefix, words }),
                "{line}"
            );
        }
    }
}
