//! The drift check: the files generated from the CRD types stay in sync with them, and the
//! example policies stay well-formed (their validity is checked by the core's own tests).
//!
//! The CRD YAML is committed twice (`deploy/crd.yaml` for `kubectl apply`, and the Helm chart's
//! `crds/` folder), and both must be exactly [`crd_yaml`]; the manual's field reference
//! (`docs/src/reference/crd.md`) must be exactly [`crd_reference_markdown`], generated from the
//! same CRD. When the types change these tests fail; regenerate with
//!
//! ```sh
//! UPDATE_GENERATED=1 cargo test --lib crd::drift_check
//! ```
//!
//! and commit the result.

use std::path::{Path, PathBuf};

use super::reference::crd_reference_markdown;
use super::{RemediationPolicy, crd_yaml};

/// Every file that must be exactly [`crd_yaml`], relative to the repository root.
const CRD_FILES: [&str; 2] =
    ["deploy/crd.yaml", "charts/kube-remediator/crds/remediationpolicies.remediator.io.yaml"];

/// The manual's page of every CRD field, generated from the CRD by [`crd_reference_markdown`].
const REFERENCE_PAGE: &str = "docs/src/reference/crd.md";

/// The example policies under `deploy/examples/`, each of which must be a valid policy.
pub const EXAMPLES: [&str; 2] =
    ["deploy/examples/dry-run-audit.yaml", "deploy/examples/enforce-stateless.yaml"];

/// The command that rewrites every generated file.
const REGENERATE: &str = "UPDATE_GENERATED=1 cargo test --lib crd::drift_check";

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Whether the developer asked to rewrite generated files instead of checking them.
fn updating() -> bool {
    std::env::var_os("UPDATE_GENERATED").is_some_and(|v| v == "1")
}

/// Checks (or, when updating, writes) one generated file. Returns the problem, if any.
fn check_or_update(path: &Path, want: &str, update: bool) -> Option<String> {
    let shown = path.strip_prefix(repo_root()).unwrap_or(path).display();
    let current = std::fs::read_to_string(path).ok();
    if current.as_deref() == Some(want) {
        return None;
    }
    if update {
        if let Some(dir) = path.parent()
            && let Err(e) = std::fs::create_dir_all(dir)
        {
            return Some(format!("cannot create {}: {e}", dir.display()));
        }
        return std::fs::write(path, want).err().map(|e| format!("cannot write {shown}: {e}"));
    }
    Some(match current {
        None => format!("{shown} is missing"),
        Some(current) => {
            let line = current
                .lines()
                .zip(want.lines())
                .position(|(a, b)| a != b)
                .unwrap_or_else(|| current.lines().count().min(want.lines().count()));
            format!(
                "{shown} differs from what the CRD generates from line {} on (has {:?}, want {:?})",
                line + 1,
                current.lines().nth(line).unwrap_or("<end of file>"),
                want.lines().nth(line).unwrap_or("<end of file>"),
            )
        }
    })
}

#[test]
fn crd_files_match_the_types() {
    let want = crd_yaml();
    assert!(!want.is_empty(), "crd_yaml() is empty");
    let update = updating();
    let problems: Vec<String> = CRD_FILES
        .iter()
        .filter_map(|file| check_or_update(&repo_root().join(file), &want, update))
        .collect();
    assert!(
        problems.is_empty(),
        "the generated CRD files are out of date with src/crd/mod.rs:\n  {}\n\
         Regenerate them with `{REGENERATE}` and commit the result.",
        problems.join("\n  ")
    );
}

#[test]
fn crd_reference_page_matches_the_crd() {
    let want = crd_reference_markdown();
    let problem = check_or_update(&repo_root().join(REFERENCE_PAGE), &want, updating());
    assert!(
        problem.is_none(),
        "the manual's CRD reference is out of date with src/crd/mod.rs:\n  {}\n\
         Regenerate it with `{REGENERATE}` and commit the result.",
        problem.unwrap_or_default()
    );
}

#[test]
fn dry_run_audit_example_is_the_default_policy() {
    let text = std::fs::read_to_string(repo_root().join(EXAMPLES[0])).expect("dry-run-audit.yaml");
    let policy: RemediationPolicy = yaml_serde::from_str(&text).expect("a RemediationPolicy");
    assert_eq!(policy.spec, super::RemediationPolicySpec::default());
}

#[test]
fn examples_apply_with_the_crd_api_version_and_kind() {
    use kube::Resource;
    for file in EXAMPLES {
        let text = std::fs::read_to_string(repo_root().join(file)).expect("example");
        let value: yaml_serde::Value = yaml_serde::from_str(&text).expect("YAML");
        assert_eq!(
            value["apiVersion"].as_str(),
            Some(RemediationPolicy::api_version(&()).as_ref()),
            "{file}"
        );
        assert_eq!(value["kind"].as_str(), Some(RemediationPolicy::kind(&()).as_ref()), "{file}");
    }
}
