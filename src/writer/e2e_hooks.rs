//! Test builds only (cargo feature `e2e-hooks`): hooks that hold a force delete at chosen
//! instants, so an end-to-end test can change the world between the plan and the request, or
//! kill the process between the request and its record.

use std::path::Path;
use std::time::{Duration, Instant};

use tracing::{info, warn};

use super::Writer;
use crate::core::PodTarget;

impl Writer {
    /// Test builds only (cargo feature `e2e-hooks`): before the last look of each force delete,
    /// create `<dir>/<pod uid>.held` and wait until `<dir>/<pod uid>.release` exists (at most
    /// 120 s), so an end-to-end test can change the world between the plan and the request.
    pub fn with_e2e_hold_dir(self, dir: Option<std::path::PathBuf>) -> Self {
        Writer { hold_dir: dir, ..self }
    }

    pub(super) async fn hold_before_last_look(&self, pod: &PodTarget) {
        let Some(dir) = &self.hold_dir else { return };
        if hold(dir, pod, ("held", "release"), "holding before the last look").await {
            info!(pod = %pod.name, "e2e hook: released");
        }
    }

    /// With `<hold dir>/hold-after-delete` present: after the DELETE is answered, before its
    /// outcome is recorded, create `<DIR>/<pod uid>.deleted` and wait (up to 120 s) for
    /// `<DIR>/<pod uid>.after`, so a test can kill the process in that instant.
    pub(super) async fn hold_after_delete(&self, pod: &PodTarget) {
        let Some(dir) = &self.hold_dir else { return };
        if dir.join("hold-after-delete").exists() {
            hold(dir, pod, ("deleted", "after"), "holding after the DELETE").await;
        }
    }
}

/// Creates `<dir>/<pod uid>.<held>` and waits until `<dir>/<pod uid>.<release>` exists (at most
/// 120 s); `false` when the first cannot be written (then it does not wait).
async fn hold(dir: &Path, pod: &PodTarget, (held, release): (&str, &str), what: &str) -> bool {
    let held = dir.join(format!("{}.{held}", pod.uid));
    let release = dir.join(format!("{}.{release}", pod.uid));
    if let Err(e) = std::fs::write(&held, format!("{}/{}", pod.namespace, pod.name)) {
        warn!(error = %e, "e2e hook: cannot write {}", held.display());
        return false;
    }
    info!(pod = %pod.name, "e2e hook: {what}");
    let deadline = Instant::now() + Duration::from_secs(120);
    while !release.exists() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    true
}
