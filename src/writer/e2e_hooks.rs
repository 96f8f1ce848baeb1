//! Test builds only (cargo feature `e2e-hooks`): hooks that hold a force delete at chosen
//! instants, so an end-to-end test can change the world between the plan and the request, or
//! kill the process between the request and its record.

use tracing::{info, warn};

use super::Writer;
use crate::core::ForceDelete;

impl Writer {
    /// Test builds only (cargo feature `e2e-hooks`): before the last look of each force delete,
    /// create `<dir>/<pod uid>.held` and wait until `<dir>/<pod uid>.release` exists (at most
    /// 120 s), so an end-to-end test can change the world between the plan and the request.
    pub fn with_e2e_hold_dir(self, dir: Option<std::path::PathBuf>) -> Self {
        Writer { hold_dir: dir, ..self }
    }

    pub(super) async fn hold_before_last_look(&self, fd: &ForceDelete) {
        let Some(dir) = &self.hold_dir else { return };
        let held = dir.join(format!("{}.held", fd.uid));
        let release = dir.join(format!("{}.release", fd.uid));
        if let Err(e) = std::fs::write(&held, format!("{}/{}", fd.namespace, fd.name)) {
            warn!(error = %e, "e2e hook: cannot write {}", held.display());
            return;
        }
        info!(pod = %fd.name, "e2e hook: holding before the last look");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        while !release.exists() && std::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        info!(pod = %fd.name, "e2e hook: released");
    }

    /// With `<hold dir>/hold-after-delete` present: after the DELETE is answered, before its
    /// outcome is recorded, create `<DIR>/<pod uid>.deleted` and wait (up to 120 s) for
    /// `<DIR>/<pod uid>.after`, so a test can kill the process in that instant.
    pub(super) async fn hold_after_delete(&self, fd: &ForceDelete) {
        let Some(dir) = &self.hold_dir else { return };
        if !dir.join("hold-after-delete").exists() {
            return;
        }
        let deleted = dir.join(format!("{}.deleted", fd.uid));
        let after = dir.join(format!("{}.after", fd.uid));
        if let Err(e) = std::fs::write(&deleted, format!("{}/{}", fd.namespace, fd.name)) {
            warn!(error = %e, "e2e hook: cannot write {}", deleted.display());
            return;
        }
        info!(pod = %fd.name, "e2e hook: holding after the DELETE");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        while !after.exists() && std::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }
}
