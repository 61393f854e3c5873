//! The Deployment controller: its pods, all from the current template, as
//! many as it asks for, and its status.

use super::workload::workload;
use super::{Cluster, Key, pod_key};

impl Cluster {
    /// A Deployment's pods, as many as it asks for, each running its
    /// template, and its status.
    pub(super) fn deployment(&mut self, key: &Key) {
        let Some(deployment) = self.objects.get(key).cloned() else {
            return;
        };
        let (replicas, template) = workload(&deployment);
        for index in 0..replicas {
            self.ensure_pod(&pod_key(key, index), &template, &deployment);
        }
        self.remove_extra_pods(key, &deployment, replicas);
        self.set_workload_status(key, &deployment);
    }
}
