//! Prometheus metrics of hook calls: a counter and a latency histogram per
//! operator, hook and outcome, in the text exposition format.

use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry, TextEncoder,
};

/// The media type of the text exposition format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

const LABELS: [&str; 3] = ["operator", "hook", "outcome"];

/// The metrics one server instance keeps.
#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    requests: IntCounterVec,
    duration: HistogramVec,
}

impl Metrics {
    /// A fresh registry with the hook metrics registered, every series of
    /// each `(operator, hook)` and outcome at zero, so dashboards and alerts
    /// work on a pod that has answered nothing yet.
    pub fn new<'a>(hooks: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let registry = Registry::new();
        let requests = IntCounterVec::new(
            Opts::new(
                "opshooks_hook_requests_total",
                "Hook calls, by operator, hook and outcome (client_gone: the answer was never delivered).",
            ),
            &LABELS,
        )
        .expect("valid metric");
        let duration = HistogramVec::new(
            HistogramOpts::new(
                "opshooks_hook_duration_seconds",
                "Time from receiving a hook call to answering it, by operator, hook and outcome.",
            )
            .buckets(vec![
                0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                10.0,
            ]),
            &LABELS,
        )
        .expect("valid metric");
        registry
            .register(Box::new(requests.clone()))
            .expect("registered once");
        registry
            .register(Box::new(duration.clone()))
            .expect("registered once");
        for (operator, hook) in hooks {
            for outcome in super::error::OUTCOMES {
                let labels = [operator, hook, outcome];
                requests.with_label_values(&labels);
                duration.with_label_values(&labels);
            }
        }
        for outcome in super::error::UNROUTED_OUTCOMES {
            requests.with_label_values(&["", "", outcome]);
        }
        Metrics {
            registry,
            requests,
            duration,
        }
    }

    /// Records one answered hook call.
    pub fn observe(&self, operator: &str, hook: &str, outcome: &str, seconds: f64) {
        let labels = [operator, hook, outcome];
        self.requests.with_label_values(&labels).inc();
        self.duration.with_label_values(&labels).observe(seconds);
    }

    /// Counts one refusal made before a route was known (`operator` and
    /// `hook` empty). Only the counter: hyper's refusals are not timed.
    pub fn refused_unrouted(&self, status: axum::http::StatusCode) {
        let outcome = super::error::outcome(status);
        self.requests.with_label_values(&["", "", outcome]).inc();
    }

    /// The metrics in Prometheus text format.
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut out)
            .expect("text encoding cannot fail");
        String::from_utf8(out).expect("metrics text is UTF-8")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_show_up_with_their_labels() {
        let metrics = Metrics::new([("webserver", "sync")]);
        let fresh = metrics.render();
        assert!(
            fresh.contains(
                r#"opshooks_hook_requests_total{hook="sync",operator="webserver",outcome="overloaded"} 0"#
            ),
            "{fresh}"
        );
        metrics.observe("webserver", "sync", "ok", 0.002);
        metrics.observe("webserver", "sync", "ok", 0.003);
        let text = metrics.render();
        assert!(
            text.contains(
                r#"opshooks_hook_requests_total{hook="sync",operator="webserver",outcome="ok"} 2"#
            ),
            "{text}"
        );
        assert!(
            text.contains(r#"opshooks_hook_duration_seconds_bucket{hook="sync",operator="webserver",outcome="ok",le="0.0025"} 1"#),
            "{text}"
        );
    }
}
