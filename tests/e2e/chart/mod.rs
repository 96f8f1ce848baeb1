//! The Helm chart installed on the test control plane. The chart's other trials need only `helm`
//! and `promtool`, and are packaging trials (`tests/packaging/chart/`).
//!
//! - `chart-install`: `helm install` of the packaged chart on the test control plane; the
//!   operator, run out of cluster as the chart's ServiceAccount (impersonated), starts and
//!   serves its policy, and is refused Secrets and node deletion; a SelfSubjectAccessReview
//!   confirms every grant of `NEEDED` (`tests/support/rbac.rs`). `tools/test` runs it once more
//!   with the binary from the image and the image's digest set.
//! - `chart-admission-guard`: the chart's admission guard (a ValidatingAdmissionPolicy) refuses
//!   requests forged with the operator's identity (DELETE of a running pod or of a Ready node,
//!   node and pod patches beyond what remediation writes), naming itself, and lets the
//!   operator's real remediations through (force delete, cordon, out-of-service taint, Node
//!   deletion, finalizer removal).
//!
//! One file per trial: `install.rs` and `admission_guard.rs`. The pinned `helm` and `helm
//! package` are test support (`tests/support/chart.rs`).

mod admission_guard;
mod install;

use libtest_mimic::Trial;

use crate::e2e;

use admission_guard::the_guard_refuses_forged_writes_and_passes_remediations;
use install::installed_chart_grants_enough_and_no_more;

pub fn trials() -> Vec<Trial> {
    vec![
        e2e!("chart-install", installed_chart_grants_enough_and_no_more),
        e2e!("chart-admission-guard", the_guard_refuses_forged_writes_and_passes_remediations),
    ]
}
