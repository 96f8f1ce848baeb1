//! `chart-rbac`: the chart's ClusterRole and Roles grant exactly `NEEDED`, the table of what the
//! code calls (`tests/support/rbac.rs`), to the chart's ServiceAccount alone, without wildcards.

use std::collections::BTreeSet;

use anyhow::{Context, Result, bail, ensure};
use kube_remediator::adapters::NODE_LEASE_NAMESPACE;
use serde_json::{Value, json};

use super::{documents, of_kind, one, str_at, strings};
use crate::support::chart::Helm;
use crate::support::rbac::{Grant, Scope, grant, needed};

// ----- chart-rbac --------------------------------------------------------------------------------

pub(super) fn rbac_is_exactly_what_the_code_needs() -> Result<()> {
    let helm = Helm::new()?;
    let namespace = "remediator-system";
    for (leader_election, enabled, extra) in [
        (true, vec![], vec!["--set", "serviceAccount.name=remediator"]),
        (false, vec![], vec!["--set", "leaderElection.enabled=false"]),
        (true, vec!["nodeActions.enabled"], vec!["--set", "nodeActions.enabled=true"]),
    ] {
        let docs = documents(&helm.template("rbac", namespace, &extra)?)?;
        let granted =
            chart_grants(&docs, namespace).with_context(|| format!("with {}", extra.join(" ")))?;
        let want = needed(leader_election, &enabled);
        let missing: Vec<String> = want
            .iter()
            .filter(|(g, _)| !granted.contains(g))
            .map(|(g, why)| format!("{g} ({why})"))
            .collect();
        let extra_grants: Vec<String> =
            granted.iter().filter(|g| !want.contains_key(g)).map(Grant::to_string).collect();
        ensure!(
            missing.is_empty() && extra_grants.is_empty(),
            "the chart's RBAC ({}) differs from NEEDED in tests/support/rbac.rs:\n  \
             the code needs, the chart does not grant: {missing:#?}\n  \
             the chart grants, the code does not need: {extra_grants:#?}",
            extra.join(" ")
        );
    }
    Ok(())
}

/// What the rendered ClusterRoles and Roles grant the chart's ServiceAccount, through their
/// bindings. Fails on wildcards, unbound roles, and bindings to anyone else.
fn chart_grants(docs: &[Value], namespace: &str) -> Result<BTreeSet<Grant>> {
    let sa = one(docs, "ServiceAccount")?;
    let sa_name = str_at(sa, "/metadata/name");
    let deploy = one(docs, "Deployment")?;
    ensure!(
        str_at(deploy, "/spec/template/spec/serviceAccountName") == sa_name,
        "the pods do not run as ServiceAccount {sa_name}"
    );
    let want_subject =
        json!([{ "kind": "ServiceAccount", "name": sa_name, "namespace": namespace }]);

    let mut grants = BTreeSet::new();
    let mut bound = BTreeSet::new();
    for (binding_kind, role_kind) in
        [("ClusterRoleBinding", "ClusterRole"), ("RoleBinding", "Role")]
    {
        for binding in of_kind(docs, binding_kind) {
            let binding_ns = str_at(binding, "/metadata/namespace");
            let name = str_at(binding, "/metadata/name");
            ensure!(
                binding["subjects"] == want_subject,
                "{binding_kind} {name} binds {}, not the ServiceAccount alone",
                binding["subjects"]
            );
            ensure!(
                str_at(binding, "/roleRef/kind") == role_kind,
                "{binding_kind} {name} refers to a {}",
                str_at(binding, "/roleRef/kind")
            );
            let role_name = str_at(binding, "/roleRef/name");
            let role = of_kind(docs, role_kind)
                .into_iter()
                .find(|r| {
                    str_at(r, "/metadata/name") == role_name
                        && str_at(r, "/metadata/namespace") == binding_ns
                })
                .with_context(|| format!("{binding_kind} {name}: no {role_kind} {role_name}"))?;
            bound.insert((role_kind, binding_ns.to_string(), role_name.to_string()));
            let scope = match (role_kind, binding_ns) {
                ("ClusterRole", _) => Scope::Cluster,
                (_, ns) if ns == NODE_LEASE_NAMESPACE => Scope::NodeLeases,
                (_, ns) if ns == namespace => Scope::Release,
                (_, ns) => bail!("Role {role_name} in unexpected namespace {ns:?}"),
            };
            for rule in role["rules"].as_array().into_iter().flatten() {
                ensure!(rule.get("nonResourceURLs").is_none(), "{role_name}: {rule}");
                let names = strings(&rule["resourceNames"]);
                let names = if names.is_empty() { vec![String::new()] } else { names };
                for group in strings(&rule["apiGroups"]) {
                    for resource in strings(&rule["resources"]) {
                        for verb in strings(&rule["verbs"]) {
                            ensure!(
                                ![&group, &resource, &verb].iter().any(|s| s.contains('*')),
                                "{role_kind} {role_name} has a wildcard: {rule}"
                            );
                            for name in &names {
                                grants.insert(grant(scope, &group, &resource, name, &verb));
                            }
                        }
                    }
                }
            }
        }
    }
    for kind in ["ClusterRole", "Role"] {
        for role in of_kind(docs, kind) {
            let key = (
                kind,
                str_at(role, "/metadata/namespace").to_string(),
                str_at(role, "/metadata/name").to_string(),
            );
            ensure!(bound.contains(&key), "{kind} {} is bound to nobody", key.2);
        }
    }
    Ok(grants)
}
