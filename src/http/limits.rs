//! The limits the server enforces on every hook call, resolved from the
//! flags (0 meaning the default).

use std::time::Duration;

/// Limits the server enforces on every hook call.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Largest accepted request body, in bytes.
    pub max_body_bytes: usize,
    /// Deadline for reading a body and answering it.
    pub request_timeout: Duration,
    /// Most hook computations at once.
    pub max_concurrent: usize,
    /// Most further calls waiting (reading their body or for a worker).
    pub max_queued: usize,
    /// Most bytes of bodies held by all calls in progress.
    pub max_buffered_bytes: usize,
    /// The slowest a body may arrive, in bytes a second on average from
    /// [`BODY_GRACE`] after its call began (0: no minimum); nor may it
    /// pause for longer than [`BODY_GRACE`].
    pub min_body_rate: u64,
}

/// How long a body may pause between two of its parts, and from when its
/// average rate counts.
pub const BODY_GRACE: Duration = Duration::from_secs(2);

/// The default of --min-body-bytes-per-second: Metacontroller sends a
/// whole body at once, so only a client that holds a place on purpose is
/// this slow.
pub const DEFAULT_MIN_BODY_RATE: u64 = 8 * 1024;

impl Limits {
    /// Limits from the flags, where 0 means the default: one computation
    /// per CPU core, [`DEFAULT_QUEUED`] waiting, twice the largest body held.
    pub fn new(
        max_body_bytes: usize,
        request_timeout: Duration,
        max_concurrent: usize,
        max_queued: usize,
        max_buffered_bytes: usize,
        min_body_rate: u64,
    ) -> Self {
        let or = |value: usize, default: fn() -> usize| if value == 0 { default() } else { value };
        Limits {
            max_body_bytes,
            request_timeout,
            max_concurrent: or(max_concurrent, || {
                std::thread::available_parallelism().map_or(1, usize::from)
            }),
            max_queued: or(max_queued, || DEFAULT_QUEUED),
            max_buffered_bytes: if max_buffered_bytes == 0 {
                max_body_bytes.saturating_mul(2)
            } else {
                max_buffered_bytes
            },
            min_body_rate,
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits::new(
            32 * 1024 * 1024,
            Duration::from_secs(9),
            0,
            0,
            0,
            DEFAULT_MIN_BODY_RATE,
        )
    }
}

/// How many calls may wait for a worker by default: small calls cost
/// little to hold, and the byte budget refuses large ones early.
pub const DEFAULT_QUEUED: usize = 256;
