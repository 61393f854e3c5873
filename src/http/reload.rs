//! Values built from files that change underneath a running server: the TLS
//! certificate cert-manager rotates, the bearer token a Secret holds. Each
//! is re-read on an interval and swapped in when its bytes change; a new
//! version that does not parse is logged and the old one kept, so a
//! half-written rotation never takes the server down.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tracing::{info, warn};

/// Builds a value from the bytes of its files, in the order they were given.
pub type Build<T> = fn(&[Vec<u8>]) -> Result<T, String>;

/// A value built from files, rebuilt when their bytes change.
pub struct Reloading<T> {
    what: &'static str,
    paths: Vec<PathBuf>,
    build: Build<T>,
    state: RwLock<(Vec<Vec<u8>>, Arc<T>)>,
}

// By hand: the value may be a secret, so only the files are shown.
impl<T> std::fmt::Debug for Reloading<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reloading")
            .field("what", &self.what)
            .field("paths", &self.paths)
            .finish_non_exhaustive()
    }
}

impl<T> Reloading<T> {
    /// Reads the files and builds the first value; any error is fatal here,
    /// since the server has nothing to fall back on yet.
    pub fn load(what: &'static str, paths: Vec<PathBuf>, build: Build<T>) -> Result<Self, String> {
        let bytes = read_all(&paths)?;
        let value = build(&bytes).map_err(|err| format!("{what}: {err}"))?;
        Ok(Reloading {
            what,
            paths,
            build,
            state: RwLock::new((bytes, Arc::new(value))),
        })
    }

    /// The value in use now.
    pub fn current(&self) -> Arc<T> {
        Arc::clone(&self.lock_read().1)
    }

    /// Re-reads the files; swaps in a new value when they changed and it
    /// builds. `Ok(true)` when a new value is in use.
    pub fn refresh(&self) -> Result<bool, String> {
        let bytes = read_all(&self.paths)?;
        if self.lock_read().0 == bytes {
            return Ok(false);
        }
        let value = (self.build)(&bytes).map_err(|err| format!("{}: {err}", self.what))?;
        let mut state = self.state.write().unwrap_or_else(|e| e.into_inner());
        *state = (bytes, Arc::new(value));
        Ok(true)
    }

    fn lock_read(&self) -> std::sync::RwLockReadGuard<'_, (Vec<Vec<u8>>, Arc<T>)> {
        // A panic while holding the lock cannot leave a half-built value:
        // the pair is replaced whole.
        self.state.read().unwrap_or_else(|e| e.into_inner())
    }
}

fn read_all(paths: &[PathBuf]) -> Result<Vec<Vec<u8>>, String> {
    paths
        .iter()
        .map(|path| {
            std::fs::read(path).map_err(|err| format!("cannot read {}: {err}", path.display()))
        })
        .collect()
}

/// Anything the reload thread refreshes.
pub trait Refresh: Send + Sync {
    /// See [`Reloading::refresh`].
    fn refresh(&self) -> Result<bool, String>;
    /// What it is, for logs.
    fn what(&self) -> &'static str;
}

impl<T: Send + Sync> Refresh for Reloading<T> {
    fn refresh(&self) -> Result<bool, String> {
        Reloading::refresh(self)
    }

    fn what(&self) -> &'static str {
        self.what
    }
}

/// Refreshes every watched value each `interval`, for the life of the
/// process, on a thread of its own (file reads never block the workers).
pub fn spawn(watched: Vec<Arc<dyn Refresh>>, interval: Duration) {
    if watched.is_empty() {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("opshooks-reload".into())
        .spawn(move || {
            loop {
                std::thread::sleep(interval);
                for item in &watched {
                    match item.refresh() {
                        Ok(true) => info!(what = item.what(), "reloaded"),
                        Ok(false) => {}
                        Err(err) => warn!(
                            what = item.what(),
                            error = %err,
                            "reload failed; still using the previous version"
                        ),
                    }
                }
            }
        });
    if let Err(err) = spawned {
        warn!(error = %err, "cannot start the reload thread; files will not be re-read");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(files: &[Vec<u8>]) -> Result<String, String> {
        let text = String::from_utf8(files[0].clone()).map_err(|e| e.to_string())?;
        if text.is_empty() {
            return Err("empty".into());
        }
        Ok(text)
    }

    #[test]
    fn a_changed_file_is_swapped_in_and_a_broken_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "one").unwrap();
        let value = Reloading::load("token", vec![path.clone()], text).unwrap();
        assert_eq!(*value.current(), "one");
        assert_eq!(value.refresh(), Ok(false));
        std::fs::write(&path, "two").unwrap();
        assert_eq!(value.refresh(), Ok(true));
        assert_eq!(*value.current(), "two");
        std::fs::write(&path, "").unwrap();
        assert_eq!(value.refresh(), Err("token: empty".into()));
        assert_eq!(*value.current(), "two");
        std::fs::remove_file(&path).unwrap();
        assert!(value.refresh().unwrap_err().starts_with("cannot read"));
        assert_eq!(*value.current(), "two");
    }
}
