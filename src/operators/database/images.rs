//! The image each major in play runs with.

use super::observed::Observed;
use super::spec::{self, Database, Major};

/// The image of each major in play: the spec's image for the spec's
/// major; for the major the StatefulSet runs, the image it runs (an
/// upgrade's dump reads the old data with the image that wrote it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Images {
    spec: (Major, String),
    running: Option<(Major, String)>,
}

impl Images {
    /// The images of the spec's major and of the running one.
    pub fn of(db: &Database, seen: &Observed) -> Self {
        let running = seen
            .running()
            .zip(seen.running_image())
            .map(|(major, image)| (major, image.to_string()));
        Images {
            spec: (db.spec.version, spec::image(db)),
            running,
        }
    }

    /// The image to run `major` with.
    pub fn image(&self, major: Major) -> String {
        match (&self.spec, &self.running) {
            ((m, image), _) if *m == major => image.clone(),
            (_, Some((m, image))) if *m == major => image.clone(),
            _ => major.image(),
        }
    }
}
