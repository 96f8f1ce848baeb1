//! Why a pod is still Terminating on a node whose kubelet answers (field incident 3), from what
//! the API shows, most specific first:
//! - finalizers left: the API server keeps the object until they are gone, whatever the
//!   kubelet does (and a force delete would not remove it either);
//! - containers still running: the kubelet has not stopped them (a hung `preStop`, a process
//!   ignoring SIGTERM and a failed SIGKILL, a wedged runtime);
//! - every container stopped and the pod still there: the kubelet is not finishing, usually a
//!   volume that does not unmount (named when the node still lists volumes in use) or a cgroup
//!   that is not cleaned up.

use super::observed::{NodeObservation, PodView};

/// The diagnosed cause of a pod stuck Terminating on a live node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StuckCause {
    /// Finalizers still on the pod, by name.
    Finalizers { names: Vec<String> },
    /// Containers still running, by name.
    ContainersRunning { names: Vec<String> },
    /// Every container stopped, the kubelet not finishing; the node's `volumesInUse`.
    KubeletNotFinishing { volumes_in_use: Vec<String> },
}

impl StuckCause {
    /// The bounded code, for metrics, Events and status.
    pub fn code(&self) -> &'static str {
        match self {
            StuckCause::Finalizers { .. } => "Finalizers",
            StuckCause::ContainersRunning { .. } => "ContainersRunning",
            StuckCause::KubeletNotFinishing { .. } => "KubeletNotFinishing",
        }
    }

    /// Whether the kubelet's own Warning Events say what it is waiting for: it still runs
    /// containers, or has stopped them and does not finish.
    pub fn kubelet_explains(&self) -> bool {
        matches!(
            self,
            StuckCause::ContainersRunning { .. } | StuckCause::KubeletNotFinishing { .. }
        )
    }

    /// Every code, for metrics that show zeros.
    pub const CODES: [&'static str; 3] = ["Finalizers", "ContainersRunning", "KubeletNotFinishing"];

    /// The evidence, in a sentence.
    pub fn detail(&self) -> String {
        match self {
            StuckCause::Finalizers { names } => format!(
                "held by finalizer{} {}: the API server keeps the pod until {} removed",
                plural(names.len()),
                names.join(", "),
                if names.len() == 1 { "it is" } else { "they are" }
            ),
            StuckCause::ContainersRunning { names } => format!(
                "container{} {} still running: the kubelet has not stopped {}",
                plural(names.len()),
                names.join(", "),
                if names.len() == 1 { "it" } else { "them" }
            ),
            StuckCause::KubeletNotFinishing { volumes_in_use } if volumes_in_use.is_empty() => {
                "every container stopped but the kubelet does not finish the pod: likely volume \
                 or cgroup clean-up"
                    .to_string()
            }
            StuckCause::KubeletNotFinishing { volumes_in_use } => format!(
                "every container stopped but the kubelet does not finish the pod: likely waiting \
                 for a volume to unmount (the node still reports in use: {})",
                shorten(volumes_in_use)
            ),
        }
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// The first three, and how many more.
fn shorten(items: &[String]) -> String {
    let shown = items.iter().take(3).cloned().collect::<Vec<_>>().join(", ");
    match items.len() {
        n if n > 3 => format!("{shown} and {} more", n - 3),
        _ => shown,
    }
}

/// The cause of `pod` being stuck on the live node `node`.
pub fn diagnose(pod: &PodView, node: &NodeObservation) -> StuckCause {
    if !pod.finalizers.is_empty() {
        StuckCause::Finalizers { names: pod.finalizers.clone() }
    } else if !pod.running_containers.is_empty() {
        StuckCause::ContainersRunning { names: pod.running_containers.to_vec() }
    } else {
        StuckCause::KubeletNotFinishing { volumes_in_use: node.volumes_in_use.to_vec() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::observed::{NodeView, fixtures};

    type Names = &'static [&'static str];
    type Row = (&'static str, Names, Names, Names, &'static str, &'static str);

    #[test]
    fn most_specific_cause_first() {
        let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let node = |volumes: &[&str]| NodeObservation {
            volumes_in_use: strings(volumes).into(),
            ..NodeView::deleted_unknown("n1").observation
        };
        // (case, finalizers, running, volumes in use, want code, want in detail)
        #[rustfmt::skip]
        let rows: [Row; 6] = [
            ("finalizer wins", &["example.com/x"], &["app"], &["v"], "Finalizers", "finalizer example.com/x:"),
            ("two finalizers", &["a/x", "b/y"], &[], &[], "Finalizers", "finalizers a/x, b/y: "),
            ("a container runs", &[], &["app"], &["v"], "ContainersRunning", "container app still running"),
            ("two run", &[], &["app", "side"], &[], "ContainersRunning", "containers app, side still"),
            ("volume still in use", &[], &[], &["kubernetes.io/csi/d^vol-1"], "KubeletNotFinishing", "in use: kubernetes.io/csi/d^vol-1"),
            ("nothing to show", &[], &[], &[], "KubeletNotFinishing", "likely volume or cgroup clean-up"),
        ];
        for (case, finalizers, running, volumes, want_code, want_detail) in rows {
            let pod = PodView {
                finalizers: strings(finalizers),
                running_containers: strings(running).into(),
                ..fixtures::pod("p", "n1")
            };
            let cause = diagnose(&pod, &node(volumes));
            assert_eq!(cause.code(), want_code, "{case}");
            assert!(cause.detail().contains(want_detail), "{case}: {}", cause.detail());
        }
        let many = strings(&["a", "b", "c", "d", "e"]);
        assert_eq!(shorten(&many), "a, b, c and 2 more");
    }
}
