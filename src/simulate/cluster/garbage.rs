//! The garbage collector: objects whose every owner is gone are deleted,
//! round after round, until none is left.

use std::collections::BTreeSet;

use super::{Actor, Cluster, Key, owners, uid_of};

impl Cluster {
    /// Deletes, until none is left, objects whose every owner is gone.
    pub fn collect_garbage(&mut self) {
        loop {
            let uids: BTreeSet<String> = self
                .objects
                .values()
                .filter_map(|o| uid_of(o).map(String::from))
                .collect();
            let orphans: Vec<Key> = self
                .objects
                .iter()
                .filter(|(_, o)| {
                    let owners = owners(o);
                    !owners.is_empty() && owners.iter().all(|uid| !uids.contains(uid))
                })
                .map(|(k, _)| k.clone())
                .collect();
            if orphans.is_empty() {
                return;
            }
            for key in orphans {
                self.delete(&key, Actor::Controllers);
            }
        }
    }
}
