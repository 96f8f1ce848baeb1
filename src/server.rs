//! What the API server the operator talks to can do: its version, read at start-up, and the
//! server-side features the operator or its chart depends on, read from discovery.
//!
//! Supported are Kubernetes 1.33 to 1.37 ([`OLDEST_SUPPORTED`], [`NEWEST_SUPPORTED`]), the
//! versions the test suite runs on. A server outside that range is used all the same, with a
//! warning: nothing here refuses to start. Where a feature is missing the operator says so once
//! at start-up (and `cluster-info` shows it); no safety check depends on one, so none is lost.

use k8s_openapi::apimachinery::pkg::version::Info;
use kube::Client;
use tracing::{info, warn};

use crate::index::watches::{InitialLists, PAGE_SIZE};

/// The oldest Kubernetes minor (1.x) the operator is tested on.
pub const OLDEST_SUPPORTED: u32 = 33;
/// The newest Kubernetes minor (1.x) the operator is tested on.
pub const NEWEST_SUPPORTED: u32 = 37;

/// The API group version that serves ValidatingAdmissionPolicy (GA in 1.30), which the chart's
/// admission guard needs.
const ADMISSION_POLICY_GROUP: &str = "admissionregistration.k8s.io/v1";

/// What the server said about itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerFeatures {
    /// `gitVersion`, e.g. `v1.37.2`.
    pub git_version: String,
    /// The minor version of a 1.x server; `None` if the server's version cannot be read or is
    /// not 1.x.
    pub minor: Option<u32>,
    /// Discovery lists `validatingadmissionpolicies` in `admissionregistration.k8s.io/v1`; `None`
    /// where discovery could not be read.
    pub admission_policies: Option<bool>,
}

/// Where the server's version stands against the tested range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Support {
    Supported,
    Older,
    Newer,
    Unknown,
}

/// One line of the feature report: a feature and what this server does with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FeatureLine {
    pub feature: &'static str,
    /// `yes`, `no`, `alpha` (present behind a feature gate the operator cannot see), or
    /// `unknown`.
    pub state: &'static str,
    /// What the operator does about it, in a sentence.
    pub note: String,
}

impl ServerFeatures {
    /// Reads the version and discovery. Never fails: what cannot be read is `unknown`.
    pub async fn detect(client: &Client) -> ServerFeatures {
        let version = client
            .apiserver_version()
            .await
            .inspect_err(|e| warn!(error = %e, "cannot read the API server's version"))
            .ok();
        Self::for_version(client, version.as_ref()).await
    }

    /// Like [`ServerFeatures::detect`], with the version already read (`None`: unknown); reads
    /// discovery only.
    pub async fn for_version(client: &Client, version: Option<&Info>) -> ServerFeatures {
        let git_version = version.map_or_else(|| "unknown".to_string(), |v| v.git_version.clone());
        let minor = version.and_then(|v| parse_minor(&v.major, &v.minor));
        let admission_policies = match client.list_api_group_resources(ADMISSION_POLICY_GROUP).await
        {
            Ok(list) => {
                Some(list.resources.iter().any(|r| r.name == "validatingadmissionpolicies"))
            }
            Err(kube::Error::Api(s)) if s.code == 404 => Some(false),
            Err(e) => {
                warn!(error = %e, "cannot read discovery of {ADMISSION_POLICY_GROUP}");
                None
            }
        };
        ServerFeatures { git_version, minor, admission_policies }
    }

    pub fn support(&self) -> Support {
        match self.minor {
            None => Support::Unknown,
            Some(m) if m < OLDEST_SUPPORTED => Support::Older,
            Some(m) if m > NEWEST_SUPPORTED => Support::Newer,
            Some(_) => Support::Supported,
        }
    }

    /// How watches get their initial state on this server (see [`InitialLists::for_server`]).
    pub fn initial_lists(&self) -> InitialLists {
        InitialLists::for_server(self.minor)
    }

    /// The server-dependent features, one line each, in the order the README's table lists them.
    pub fn report(&self) -> Vec<FeatureLine> {
        let at_least = |m: u32| match self.minor {
            Some(minor) if minor >= m => "yes",
            Some(_) => "no",
            None => "unknown",
        };
        let lists = self.initial_lists();
        vec![
            FeatureLine {
                feature: "streaming initial lists",
                state: if self.minor.is_none() {
                    "unknown"
                } else if lists == InitialLists::Streaming {
                    "yes"
                } else {
                    "no"
                },
                note: match lists {
                    InitialLists::Streaming => "watches start from a streamed list".into(),
                    InitialLists::Paged => format!(
                        "watches start from lists paged by {} (WatchList is off by default here)",
                        PAGE_SIZE
                    ),
                },
            },
            FeatureLine {
                feature: "ValidatingAdmissionPolicy",
                state: match self.admission_policies {
                    Some(true) => "yes",
                    Some(false) => "no",
                    None => "unknown",
                },
                note: match self.admission_policies {
                    Some(true) => {
                        "the chart's admission guard can run (admissionGuard.enabled)".into()
                    }
                    _ => "the chart's admission guard cannot run: install with \
                          admissionGuard.enabled=false; the safety kernel still checks every write"
                        .into(),
                },
            },
            FeatureLine {
                feature: "pod DisruptionTarget condition",
                state: at_least(31),
                note: "PodGC, the taint manager and this operator (before a force delete) say \
                       why they delete a pod"
                    .into(),
            },
            FeatureLine {
                feature: "out-of-service taint",
                state: at_least(28),
                note: "`nodeActions.outOfServiceTaintAfter` fences a dead node; its volumes detach"
                    .into(),
            },
            FeatureLine {
                feature: "node lifecycle conditions",
                state: gated(self.minor, 37),
                note: "MaintenanceInProgress and friends (alpha, gate NodeLifecycleConditions); \
                       a node in maintenance or shutting down is left alone (nodeLifecycle)"
                    .into(),
            },
            FeatureLine {
                feature: "StatefulSet Recreate",
                state: gated(self.minor, 37),
                note: "updateStrategy Recreate (alpha, gate StatefulSetRecreateStrategy): its \
                       rollouts blocked by a dead node's pod are reported and released"
                    .into(),
            },
        ]
    }

    /// Logs what was found, once, at start-up: the version and each feature at info; a version
    /// outside the tested range, and a missing admission policy API, at warn.
    pub fn log(&self) {
        match self.support() {
            Support::Supported => info!(
                server = self.git_version,
                "Kubernetes {} is supported (1.{OLDEST_SUPPORTED} to 1.{NEWEST_SUPPORTED})",
                self.git_version
            ),
            Support::Older | Support::Newer => warn!(
                server = self.git_version,
                "Kubernetes {} is outside the tested range 1.{OLDEST_SUPPORTED} to \
                 1.{NEWEST_SUPPORTED}: running anyway; report what does not work",
                self.git_version
            ),
            Support::Unknown => {
                warn!("the API server's version is unknown: running as on 1.{OLDEST_SUPPORTED}")
            }
        }
        for line in self.report() {
            if line.feature == "ValidatingAdmissionPolicy" && line.state != "yes" {
                warn!(feature = line.feature, state = line.state, "{}", line.note);
            } else {
                info!(feature = line.feature, state = line.state, "{}", line.note);
            }
        }
    }
}

/// A feature that exists from `since` on behind an alpha gate whose state the operator cannot
/// read from discovery.
fn gated(minor: Option<u32>, since: u32) -> &'static str {
    match minor {
        Some(m) if m >= since => "alpha",
        Some(_) => "no",
        None => "unknown",
    }
}

/// The minor version of a 1.x server (`"37"`, or `"37+"` as some providers report it).
pub(crate) fn parse_minor(major: &str, minor: &str) -> Option<u32> {
    if major.trim() != "1" {
        return None;
    }
    minor.trim().trim_end_matches('+').parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(minor: Option<u32>, admission_policies: Option<bool>) -> ServerFeatures {
        ServerFeatures { git_version: "v1.x".into(), minor, admission_policies }
    }

    fn state(f: &ServerFeatures, feature: &str) -> &'static str {
        f.report().into_iter().find(|l| l.feature == feature).map(|l| l.state).unwrap_or("absent")
    }

    #[test]
    fn minor_versions_as_servers_report_them() {
        for (major, minor, want) in [
            ("1", "37", Some(37)),
            ("1", "33+", Some(33)),
            (" 1", " 36 ", Some(36)),
            ("2", "0", None),
            ("1", "", None),
            ("1", "x", None),
        ] {
            assert_eq!(parse_minor(major, minor), want, "{major}.{minor}");
        }
    }

    #[test]
    fn support_follows_the_tested_range() {
        for (minor, want) in [
            (Some(32), Support::Older),
            (Some(33), Support::Supported),
            (Some(35), Support::Supported),
            (Some(37), Support::Supported),
            (Some(38), Support::Newer),
            (None, Support::Unknown),
        ] {
            assert_eq!(server(minor, Some(true)).support(), want, "{minor:?}");
        }
    }

    #[test]
    fn features_by_version() {
        // (minor, streaming lists, lifecycle conditions, StatefulSet Recreate)
        for (minor, lists, lifecycle, recreate) in [
            (Some(33), "no", "no", "no"),
            (Some(34), "yes", "no", "no"),
            (Some(36), "yes", "no", "no"),
            (Some(37), "yes", "alpha", "alpha"),
            (None, "unknown", "unknown", "unknown"),
        ] {
            let f = server(minor, Some(true));
            assert_eq!(state(&f, "streaming initial lists"), lists, "{minor:?}");
            assert_eq!(state(&f, "node lifecycle conditions"), lifecycle, "{minor:?}");
            assert_eq!(state(&f, "StatefulSet Recreate"), recreate, "{minor:?}");
        }
        assert_eq!(server(None, None).initial_lists(), InitialLists::Paged);
    }

    #[test]
    fn a_missing_admission_policy_api_says_how_to_install() {
        for (found, want) in [(Some(true), "yes"), (Some(false), "no"), (None, "unknown")] {
            let f = server(Some(33), found);
            assert_eq!(state(&f, "ValidatingAdmissionPolicy"), want);
            let note = f.report().into_iter().find(|l| l.feature == "ValidatingAdmissionPolicy");
            let note = note.map(|l| l.note).unwrap_or_default();
            assert_eq!(
                note.contains("admissionGuard.enabled=false"),
                found != Some(true),
                "{note}"
            );
        }
    }
}
