//! The API server itself enforces the `RemediationPolicy` schema generated from the Rust types:
//! the example policies are accepted, bad specs are refused with a 422 naming the broken rule
//! (OpenAPI patterns, enums and bounds, and every CEL rule), defaults are filled in by the API
//! server exactly as the Rust `Default`s say, the printer columns are served, and `kubectl
//! explain` shows the field docs.
//!
//! Policies are cluster-scoped, so every policy here is named after its test (`pv-...`), is in
//! DryRun, and selects nodes with a label no node carries: even with an operator running, none
//! of them could touch anything. Refusals are checked with real creates; policies that merely
//! must be accepted verbatim (an `Enforce` example, an empty spec) are created with a
//! server-side dry run, which validates and defaults exactly like a create but stores nothing.

use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GetParams, PostParams};
use kube::{CustomResourceExt, Resource};
use kube_remediator::crd::{RemediationPolicy, RemediationPolicySpec};
use libtest_mimic::Trial;
use serde_json::{Value, json};

use crate::e2e;
use crate::support::cluster::repo_root;
use crate::support::env::TEST_LABEL;
use crate::support::{TestEnv, install_crd, shared_cluster, wait_for};

pub fn trials() -> Vec<Trial> {
    vec![
        e2e!("pv-examples-accepted", example_policies_are_accepted),
        e2e!("pv-edge-cases-accepted", specs_at_the_limits_are_accepted),
        e2e!("pv-bad-specs-refused", bad_specs_are_refused_naming_the_rule),
        e2e!("pv-defaults", api_server_fills_in_the_rust_defaults),
        e2e!("pv-printer-columns", printer_columns_are_served),
        e2e!("pv-explain", kubectl_explain_shows_the_field_docs),
    ]
}

/// The example policies shipped in `deploy/examples/`.
const EXAMPLES: [&str; 2] = ["dry-run-audit", "enforce-stateless"];

/// `RemediationPolicy` objects as untyped JSON, so that specs the Rust types cannot even
/// express (an unknown mode) can be sent.
fn policies(env: &TestEnv) -> Api<DynamicObject> {
    Api::all_with(env.client.clone(), &ApiResource::erase::<RemediationPolicy>(&()))
}

fn typed_policies(env: &TestEnv) -> Api<RemediationPolicy> {
    Api::all(env.client.clone())
}

/// `deadNode.fencing` with every kind of evidence switched off.
fn no_evidence() -> Value {
    json!({ "outOfServiceTaint": false, "shutdownTaint": false, "nodeDeleted": false })
}

/// A node selector that matches no node, so a policy can never act on anything.
fn no_node(env: &TestEnv) -> Value {
    json!({ "matchLabels": { TEST_LABEL: format!("{}-no-such-node", env.name) } })
}

/// What makes a policy harmless: DryRun, and no node selected.
fn isolation(env: &TestEnv) -> Value {
    json!({ "mode": "DryRun", "nodeSelector": no_node(env) })
}

/// `base` with `overlay` merged in, recursively for objects; overlay values (null included) win.
fn merged(base: &Value, overlay: &Value) -> Value {
    match (base, overlay) {
        (Value::Object(b), Value::Object(o)) => {
            let mut out = b.clone();
            for (key, value) in o {
                let merged_value = match b.get(key) {
                    Some(existing) => merged(existing, value),
                    None => value.clone(),
                };
                out.insert(key.clone(), merged_value);
            }
            Value::Object(out)
        }
        _ => overlay.clone(),
    }
}

/// A `RemediationPolicy` named `name` with `spec`, as an untyped object.
fn policy(name: &str, spec: Value) -> Result<DynamicObject> {
    Ok(serde_json::from_value(json!({
        "apiVersion": RemediationPolicy::api_version(&()),
        "kind": RemediationPolicy::kind(&()),
        "metadata": { "name": name },
        "spec": spec,
    }))?)
}

fn dry_run() -> PostParams {
    PostParams { dry_run: true, ..PostParams::default() }
}

/// Reads an example of `deploy/examples/` as JSON.
fn example(stem: &str) -> Result<Value> {
    let path = repo_root().join("deploy/examples").join(format!("{stem}.yaml"));
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    yaml_serde::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

/// The spec the Rust types make of `spec` (serde defaults for absent fields), as JSON.
fn as_rust_sees_it(spec: &Value) -> Result<Value> {
    let typed: RemediationPolicySpec =
        serde_json::from_value(spec.clone()).with_context(|| format!("deserializing {spec}"))?;
    Ok(serde_json::to_value(typed)?)
}

/// Deletes a cluster-scoped policy and waits until it is gone.
async fn delete_policy(env: &TestEnv, name: &str) -> Result<()> {
    let api = policies(env);
    api.delete(name, &DeleteParams::default()).await.with_context(|| format!("deleting {name}"))?;
    wait_for(&format!("policy {name} to be gone"), Duration::from_secs(30), || {
        let api = api.clone();
        async move { Ok(api.get_opt(name).await?.is_none().then_some(())) }
    })
    .await
}

async fn example_policies_are_accepted(env: &TestEnv) -> Result<()> {
    install_crd(&env.client).await?;
    let api = policies(env);
    for stem in EXAMPLES {
        let mut object = example(stem)?;
        let spec = object["spec"].clone();
        let name = format!("{}-{stem}", env.name);
        object["metadata"]["name"] = json!(name);

        // Verbatim (only renamed), in a dry run: accepted, and the API server's defaults for
        // the fields the example leaves out are the ones the Rust types assume.
        let verbatim: DynamicObject = serde_json::from_value(object)?;
        let answered = api
            .create(&dry_run(), &verbatim)
            .await
            .with_context(|| format!("dry-run create of deploy/examples/{stem}.yaml"))?;
        ensure!(
            answered.data["spec"] == as_rust_sees_it(&spec)?,
            "{stem}: the API server defaulted the example to {}, the Rust types read it as {}",
            answered.data["spec"],
            as_rust_sees_it(&spec)?
        );

        // For real, made harmless: created, read back typed, deleted.
        let harmless = policy(&name, merged(&spec, &isolation(env)))?;
        api.create(&PostParams::default(), &harmless)
            .await
            .with_context(|| format!("creating {name} from deploy/examples/{stem}.yaml"))?;
        let read =
            typed_policies(env).get(&name).await.with_context(|| format!("reading {name}"))?;
        kube_remediator::core::validate(&read.spec)
            .map_err(|e| anyhow::anyhow!("{name} as stored is not a valid policy: {e}"))?;
        delete_policy(env, &name).await?;
    }
    Ok(())
}

/// Specs right at the edge of each rule: the API server and `core::validate` both accept them.
async fn specs_at_the_limits_are_accepted(env: &TestEnv) -> Result<()> {
    install_crd(&env.client).await?;
    let api = policies(env);
    let cases = [
        ("lease-40s", json!({ "deadNode": { "leaseStaleFor": "40s" } })),
        ("lease-compound", json!({ "deadNode": { "leaseStaleFor": "1m30s" } })),
        (
            "ms-durations",
            json!({ "deadNode": { "notReadyFor": "1500ms" },
                                 "stuckTerminating": { "delayAfterGrace": "0s" } }),
        ),
        ("unhealthy-0", json!({ "safety": { "maxUnhealthyNodes": 0 } })),
        ("unhealthy-0pct", json!({ "safety": { "maxUnhealthyNodes": "0%" } })),
        ("unhealthy-100pct", json!({ "safety": { "maxUnhealthyNodes": "100%" } })),
        (
            "no-fencing-at-all",
            json!({ "deadNode": {
                "requireFencingFor": ["None"],
                "fencing": no_evidence(),
            }}),
        ),
        ("fencing-all", json!({ "deadNode": { "requireFencingFor": ["All"] } })),
        (
            "one-evidence",
            json!({ "deadNode": {
                "fencing": { "outOfServiceTaint": false, "shutdownTaint": false },
            }}),
        ),
        ("owner-bare", json!({ "ownerKinds": ["Bare"] })),
        ("paused", json!({ "paused": true })),
    ];
    let mut failures = Vec::new();
    for (suffix, fragment) in cases {
        let name = format!("{}-{suffix}", env.name);
        let spec = merged(&isolation(env), &fragment);
        if let Err(e) = api.create(&dry_run(), &policy(&name, spec.clone())?).await {
            failures.push(format!("{suffix}: refused by the API server: {e}"));
        }
        let typed: RemediationPolicySpec = serde_json::from_value(spec)?;
        if let Err(e) = kube_remediator::core::validate(&typed) {
            failures.push(format!("{suffix}: refused by core::validate: {e}"));
        }
    }
    ensure!(failures.is_empty(), "valid specs were refused:\n  {}", failures.join("\n  "));
    Ok(())
}

/// A spec the API server must refuse.
struct BadSpec {
    /// Name suffix.
    case: &'static str,
    /// Merged over the harmless base spec.
    fragment: Value,
    /// Every one of these must appear in the 422's message.
    want: &'static [&'static str],
    /// Whether `core::validate` refuses it too (when the Rust types can express it at all).
    /// Only duplicates in a set are fine for the core, which de-duplicates.
    core_refuses: bool,
}

fn bad_specs() -> Vec<BadSpec> {
    let bad = |case, fragment, want, core_refuses| BadSpec { case, fragment, want, core_refuses };
    const PATTERN: &str = "should match '^([0-9]+(ms|s|m|h))+$'";
    const PERCENT: &str =
        "maxUnhealthyNodes must be a non-negative integer or a percentage from 0% to 100%";
    vec![
        // OpenAPI pattern of every duration field.
        bad(
            "not-ready-words",
            json!({ "deadNode": { "notReadyFor": "5 minutes" } }),
            &["spec.deadNode.notReadyFor", PATTERN][..],
            true,
        ),
        bad(
            "delay-unitless",
            json!({ "stuckTerminating": { "delayAfterGrace": "30" } }),
            &["spec.stuckTerminating.delayAfterGrace", PATTERN],
            true,
        ),
        bad(
            "lease-days",
            json!({ "deadNode": { "leaseStaleFor": "1d" } }),
            &["spec.deadNode.leaseStaleFor", PATTERN],
            true,
        ),
        // CEL: leaseStaleFor at least the kubelet's lease duration.
        bad(
            "lease-short",
            json!({ "deadNode": { "leaseStaleFor": "30s" } }),
            &["spec.deadNode.leaseStaleFor", "leaseStaleFor must be at least 40s"],
            true,
        ),
        bad(
            "lease-39s999ms",
            json!({ "deadNode": { "leaseStaleFor": "39s999ms" } }),
            &["leaseStaleFor must be at least 40s"],
            true,
        ),
        // CEL: a force delete on a live node no sooner than a kubelet finishes a pod.
        bad(
            "force-delete-0s",
            json!({ "liveNodeStuck": { "delayAfterGrace": "0s", "forceDeleteAfter": "0s" } }),
            &["spec.liveNodeStuck", "forceDeleteAfter must be at least 5s"],
            true,
        ),
        // CEL: maxUnhealthyNodes int-or-percent.
        bad(
            "unhealthy-101pct",
            json!({ "safety": { "maxUnhealthyNodes": "101%" } }),
            &["spec.safety.maxUnhealthyNodes", PERCENT],
            true,
        ),
        bad(
            "unhealthy-negative",
            json!({ "safety": { "maxUnhealthyNodes": -1 } }),
            &["spec.safety.maxUnhealthyNodes", PERCENT],
            true,
        ),
        bad(
            "unhealthy-no-pct-sign",
            json!({ "safety": { "maxUnhealthyNodes": "30" } }),
            &["spec.safety.maxUnhealthyNodes", PERCENT],
            true,
        ),
        // CEL: requireFencingFor combinations and the evidence they need.
        bad(
            "fencing-none-mixed",
            json!({ "deadNode": { "requireFencingFor": ["None", "StatefulSet"] } }),
            &["spec.deadNode", "requireFencingFor: None cannot be combined with other entries"],
            true,
        ),
        bad(
            "fencing-all-mixed",
            json!({ "deadNode": { "requireFencingFor": ["All", "ReadWriteOnce"] } }),
            &["spec.deadNode", "requireFencingFor: All already covers every pod"],
            true,
        ),
        bad(
            "fencing-no-evidence",
            json!({ "deadNode": {
                "fencing": no_evidence(),
            }}),
            &["spec.deadNode", "requireFencingFor needs at least one kind of fencing evidence"],
            true,
        ),
        // Enums, list bounds and minimums.
        bad(
            "mode-unknown",
            json!({ "mode": "Audit" }),
            &["spec.mode", "Unsupported value: \"Audit\"", "\"DryRun\"", "\"Enforce\""],
            true,
        ),
        bad(
            "owner-daemonset",
            json!({ "ownerKinds": ["DaemonSet"] }),
            &["spec.ownerKinds[0]", "Unsupported value: \"DaemonSet\""],
            true,
        ),
        bad(
            "owner-none",
            json!({ "ownerKinds": [] }),
            &["spec.ownerKinds", "should have at least 1 items"],
            true,
        ),
        bad(
            "owner-duplicate",
            json!({ "ownerKinds": ["Job", "Job"] }),
            &["spec.ownerKinds[1]", "Duplicate value"],
            false,
        ),
        bad(
            "fencing-empty",
            json!({ "deadNode": { "requireFencingFor": [] } }),
            &["spec.deadNode.requireFencingFor", "should have at least 1 items"],
            true,
        ),
        bad(
            "rate-zero",
            json!({ "safety": { "rateLimit": { "actionsPerMinute": 0 } } }),
            &["spec.safety.rateLimit.actionsPerMinute", "greater than or equal to 1"],
            true,
        ),
        bad(
            "owner-budget-zero",
            json!({ "safety": { "maxPodsPerOwnerPerMinute": 0 } }),
            &["spec.safety.maxPodsPerOwnerPerMinute", "greater than or equal to 1"],
            true,
        ),
        bad(
            "cooldown-words",
            json!({ "safety": { "cooldown": "1 minute" } }),
            &["spec.safety.cooldown", "should match"],
            true,
        ),
        bad(
            "latch-string",
            json!({ "safety": { "latch": "yes" } }),
            &["spec.safety.latch", "must be of type boolean"],
            true,
        ),
    ]
}

async fn bad_specs_are_refused_naming_the_rule(env: &TestEnv) -> Result<()> {
    install_crd(&env.client).await?;
    let api = policies(env);
    let mut failures = Vec::new();
    for BadSpec { case, fragment, want, core_refuses } in bad_specs() {
        let name = format!("{}-{case}", env.name);
        let spec = merged(&isolation(env), &fragment);
        match api.create(&PostParams::default(), &policy(&name, spec.clone())?).await {
            Ok(_) => {
                failures.push(format!("{case}: accepted {spec}"));
                delete_policy(env, &name).await?;
            }
            Err(kube::Error::Api(status)) => {
                if status.code != 422 {
                    failures
                        .push(format!("{case}: HTTP {} instead of 422: {status:?}", status.code));
                }
                let missing: Vec<&str> =
                    want.iter().copied().filter(|w| !status.message.contains(w)).collect();
                if !missing.is_empty() {
                    failures.push(format!(
                        "{case}: the message lacks {missing:?}: {:?}",
                        status.message
                    ));
                }
            }
            Err(e) => bail!("{case}: creating {name}: {e}"),
        }
        // The same spec reaching the operator (say, through an older CRD) is refused there too.
        if let Ok(typed) = serde_json::from_value::<RemediationPolicySpec>(spec) {
            let refused = kube_remediator::core::validate(&typed).is_err();
            if refused != core_refuses {
                failures.push(format!(
                    "{case}: core::validate {} it",
                    if refused { "refuses" } else { "accepts" }
                ));
            }
        }
    }
    ensure!(failures.is_empty(), "{} problems:\n  {}", failures.len(), failures.join("\n  "));
    Ok(())
}

async fn api_server_fills_in_the_rust_defaults(env: &TestEnv) -> Result<()> {
    install_crd(&env.client).await?;
    let api = policies(env);
    let defaults = serde_json::to_value(RemediationPolicySpec::default())?;

    // The literal `spec: {}`, which would select every node: dry run only.
    let answered = api
        .create(&dry_run(), &policy(&format!("{}-empty", env.name), json!({}))?)
        .await
        .context("dry-run create of spec: {}")?;
    ensure!(
        answered.data["spec"] == defaults,
        "spec: {{}} was defaulted to {}, the Rust defaults are {defaults}",
        answered.data["spec"]
    );

    // Stored and read back: only the harmless node selector is set, mode is left out.
    let name = format!("{}-stored", env.name);
    api.create(&PostParams::default(), &policy(&name, json!({ "nodeSelector": no_node(env) }))?)
        .await
        .with_context(|| format!("creating {name}"))?;
    let read = api.get(&name).await?;
    let mut want = defaults.clone();
    want["nodeSelector"] = no_node(env);
    ensure!(
        read.data["spec"] == want,
        "{name} was stored as {}, expected the Rust defaults {want}",
        read.data["spec"]
    );
    let spec = &read.data["spec"];
    let checks = [
        ("/mode", json!("DryRun")),
        ("/paused", json!(false)),
        ("/ownerKinds", json!(["ReplicaSet", "StatefulSet", "Job", "Bare"])),
        ("/deadNode/notReadyFor", json!("5m")),
        ("/deadNode/leaseStaleFor", json!("2m")),
        ("/deadNode/requireFencingFor", json!(["StatefulSet", "ReadWriteOnce"])),
        (
            "/deadNode/fencing",
            json!({ "outOfServiceTaint": true, "shutdownTaint": true, "nodeDeleted": true }),
        ),
        ("/stuckTerminating", json!({ "enabled": true, "delayAfterGrace": "30s" })),
        ("/safety/maxUnhealthyNodes", json!("30%")),
        ("/safety/rateLimit/actionsPerMinute", json!(10)),
        ("/safety/maxPodsPerOwnerPerMinute", json!(5)),
        ("/safety/latch", json!(false)),
        ("/safety/cooldown", json!("1m")),
    ];
    for (pointer, value) in checks {
        ensure!(
            spec.pointer(pointer) == Some(&value),
            "spec{pointer} is {:?}",
            spec.pointer(pointer)
        );
    }
    ensure!(spec.get("namespaceSelector").is_none() && spec.get("podSelector").is_none());
    let typed = typed_policies(env).get(&name).await?;
    ensure!(typed.spec.mode == kube_remediator::crd::Mode::DryRun);
    delete_policy(env, &name).await?;

    // Partly written nested objects keep the defaults of their other fields, and an explicit
    // null for a non-nullable field is pruned and defaulted instead of being stored.
    let partial = json!({
        "mode": null,
        "deadNode": {
            "notReadyFor": "10m",
            "leaseStaleFor": null,
            "fencing": { "nodeDeleted": false },
        },
        "safety": { "maxUnhealthyNodes": null, "rateLimit": {} },
    });
    let nulls_defaulted = json!({
        "mode": "DryRun",
        "deadNode": { "leaseStaleFor": "2m" },
        "safety": { "maxUnhealthyNodes": "30%" },
    });
    let answered = api
        .create(&dry_run(), &policy(&format!("{}-partial", env.name), partial.clone())?)
        .await
        .context("dry-run create of a partial spec")?;
    ensure!(
        answered.data["spec"] == as_rust_sees_it(&merged(&partial, &nulls_defaulted))?,
        "a partial spec was defaulted to {}",
        answered.data["spec"]
    );
    Ok(())
}

async fn printer_columns_are_served(env: &TestEnv) -> Result<()> {
    install_crd(&env.client).await?;
    let crds: Api<CustomResourceDefinition> = Api::all(env.client.clone());
    let served = crds.get(RemediationPolicy::crd_name()).await?;
    let columns = |crd: &CustomResourceDefinition| -> Vec<(String, String, String)> {
        crd.spec
            .versions
            .iter()
            .filter(|v| v.name == "v1alpha1")
            .flat_map(|v| v.additional_printer_columns.iter().flatten())
            .map(|c| (c.name.clone(), c.type_.clone(), c.json_path.clone()))
            .collect()
    };
    let names: Vec<String> = columns(&served).into_iter().map(|(name, _, _)| name).collect();
    ensure!(
        names == ["Mode", "Paused", "Matched Nodes", "Unhealthy", "Actions", "Age"],
        "served printer columns: {names:?}"
    );
    ensure!(
        columns(&served) == columns(&RemediationPolicy::crd()),
        "served printer columns {:?} differ from the generated {:?}",
        columns(&served),
        columns(&RemediationPolicy::crd())
    );

    // What `kubectl get rp` shows: the server renders the columns as a Table.
    let name = format!("{}-table", env.name);
    policies(env).create(&PostParams::default(), &policy(&name, isolation(env))?).await?;
    let url = RemediationPolicy::url_path(&(), None);
    let mut request = kube::core::Request::new(url).get(&name, &GetParams::default())?;
    request.headers_mut().insert("accept", "application/json;as=Table;v=v1;g=meta.k8s.io".parse()?);
    let table: Value = env.client.request(request).await?;
    let headers: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["name"].as_str())
        .collect();
    ensure!(
        headers == ["Name", "Mode", "Paused", "Matched Nodes", "Unhealthy", "Actions", "Age"],
        "table columns: {headers:?}"
    );
    let cells = &table["rows"][0]["cells"];
    ensure!(
        cells[0] == json!(name) && cells[1] == json!("DryRun") && cells[2] == json!(false),
        "table row: {cells}"
    );
    delete_policy(env, &name).await
}

/// `kubectl explain` output for `path`, once the API server publishes the CRD's OpenAPI (which
/// it does asynchronously after the CRD is Established).
async fn kubectl_explain(path: &str, want: &str) -> Result<String> {
    let cluster = shared_cluster().await?;
    let (kubectl, kubeconfig) = (cluster.bin.path("kubectl"), cluster.kubeconfig.clone());
    wait_for(&format!("kubectl explain {path} to show {want:?}"), Duration::from_secs(60), || {
        let (kubectl, kubeconfig, path) = (kubectl.clone(), kubeconfig.clone(), path.to_string());
        async move {
            let arg = path.clone();
            let output = tokio::task::spawn_blocking(move || {
                std::process::Command::new(kubectl)
                    .arg("--kubeconfig")
                    .arg(kubeconfig)
                    .args(["explain", &arg])
                    .output()
            })
            .await??;
            let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
            ensure!(
                output.status.success(),
                "kubectl explain {path}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            // kubectl wraps the text to the terminal: compare with whitespace collapsed.
            let words = |t: &str| t.split_whitespace().collect::<Vec<_>>().join(" ");
            Ok(words(&stdout).contains(&words(want)).then_some(stdout))
        }
    })
    .await
}

async fn kubectl_explain_shows_the_field_docs(env: &TestEnv) -> Result<()> {
    install_crd(&env.client).await?;
    let spec =
        kubectl_explain("remediationpolicy.spec", "DryRun (default) decides exactly").await?;
    for field in ["deadNode", "mode", "nodeSelector", "ownerKinds", "paused", "safety"] {
        ensure!(
            spec.contains(field),
            "kubectl explain remediationpolicy.spec lacks {field}:\n{spec}"
        );
    }
    kubectl_explain("rp.spec.deadNode.leaseStaleFor", "At least \"40s\"").await?;
    Ok(())
}
