//! The image users run and the kubectl plugin they install, as `tools/image` builds them
//! (without a container engine) into `$KUBE_REMEDIATOR_IMAGE` (`target/image`, set by
//! `tools/test`, which builds the image first). Without that variable these trials are ignored.
//!
//! - `image-config`: the OCI image holds one layer with the static binary and its directories,
//!   nothing else; its config runs it as user 65532 with the Dockerfile's entrypoint, command,
//!   port and labels (source, version, licence); the printed digest is the layout's.
//! - `image-run`: the binary runs from the image's unpacked root filesystem (a mount namespace
//!   of its own, read-only, nothing in it but the binary: so it is static) and says its version.
//!   `tools/test` then runs `chart-install` with that binary (`run-from-image`).
//! - `image-krew`: the rendered Krew manifest names the binary, platforms and files of the
//!   plugin archive the build produced, with its sha256; the archive's binary is the image's and
//!   answers as `kubectl remediator`.
//! - `image-sbom` (`sbom.rs`): the CycloneDX SBOM beside the layout, named by digest in the
//!   manifest's annotations, and the binary's cargo-auditable section list the same crates,
//!   ours among them, at Cargo.lock's versions.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, ensure};
use libtest_mimic::Trial;
use serde_json::Value;

use crate::chart::str_at;
use crate::support::cluster::repo_root;
use crate::support::command_output;
use crate::support::operator::image_dir;

pub fn trials() -> Vec<Trial> {
    let built = image_dir().is_some();
    [
        ("image-config", image_config_is_what_the_dockerfile_says as fn(&Path) -> Result<()>),
        ("image-run", binary_runs_from_the_image_root),
        ("image-krew", krew_manifest_matches_the_plugin_archive),
        ("image-sbom", crate::sbom::sbom_and_audit_section_list_our_crates),
    ]
    .into_iter()
    .map(|(name, body)| {
        Trial::test(name, move || in_image_dir(body).map_err(|e| format!("{e:#}").into()))
            .with_ignored_flag(!built)
    })
    .collect()
}

/// Runs `body` on the image `tools/image` wrote.
fn in_image_dir(body: fn(&Path) -> Result<()>) -> Result<()> {
    let dir = image_dir().context("KUBE_REMEDIATOR_IMAGE is not set")?;
    ensure!(dir.join("digest").is_file(), "no image in {}: run tools/image first", dir.display());
    body(&dir)
}

pub(crate) const BINARY: &str = "usr/local/bin/kube-remediator";
pub(crate) const VERSION: &str = env!("CARGO_PKG_VERSION");

fn image_config_is_what_the_dockerfile_says(dir: &Path) -> Result<()> {
    let layout = dir.join("oci");
    let index = read_json(&layout.join("index.json"))?;
    let manifests = index["manifests"].as_array().context("index.json without manifests")?;
    ensure!(manifests.len() == 1, "the layout holds {} images, not one", manifests.len());
    let digest = manifests[0]["digest"].as_str().unwrap_or_default();
    let printed = std::fs::read_to_string(dir.join("digest"))?;
    ensure!(printed.trim() == digest, "tools/image printed {printed:?}, the layout holds {digest}");

    let manifest = read_json(&blob(&layout, digest))?;
    let config = read_json(&blob(&layout, str_at(&manifest, "/config/digest")))?;
    ensure!(config["os"] == "linux", "os {}", config["os"]);
    let want = dockerfile()?;
    let run = &config["config"];
    ensure!(run["User"] == want.user.as_str(), "user {} (Dockerfile: {})", run["User"], want.user);
    ensure!(run["Entrypoint"] == want.entrypoint, "entrypoint {}", run["Entrypoint"]);
    ensure!(run["Cmd"] == want.cmd, "cmd {}", run["Cmd"]);
    let ports: Vec<&String> =
        run["ExposedPorts"].as_object().into_iter().flatten().map(|(p, _)| p).collect();
    ensure!(ports == [&format!("{}/tcp", want.port)], "exposed ports {ports:?}");
    let labels: BTreeMap<String, String> = run["Labels"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
        .collect();
    ensure!(labels == want.labels, "labels {labels:?}, the Dockerfile has {:?}", want.labels);
    ensure!(labels["org.opencontainers.image.version"] == VERSION, "version label {labels:?}");
    ensure!(
        labels["org.opencontainers.image.licenses"] == env!("CARGO_PKG_LICENSE"),
        "licence label {labels:?}"
    );
    ensure!(
        run["Env"]
            .as_array()
            .is_none_or(|env| env.iter().all(|e| !e.as_str().unwrap_or("").starts_with("LD_"))),
        "env {}",
        run["Env"]
    );

    // One layer, holding the binary and the directories above it, owned by root.
    let layers = manifest["layers"].as_array().context("manifest without layers")?;
    ensure!(layers.len() == 1, "{} layers, not one", layers.len());
    let listing = command_output(
        Command::new("tar").arg("-tvzf").arg(blob(&layout, str_at(&layers[0], "/digest"))),
    )?;
    let entries: Vec<(String, String, String)> = listing
        .lines()
        .map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            (
                fields.first().copied().unwrap_or_default().to_string(),
                fields.get(1).copied().unwrap_or_default().to_string(),
                fields.last().copied().unwrap_or_default().to_string(),
            )
        })
        .collect();
    let names: Vec<&str> = entries.iter().map(|(_, _, name)| name.as_str()).collect();
    ensure!(
        names == ["usr/", "usr/local/", "usr/local/bin/", BINARY],
        "the layer holds {names:?}, not only the binary and its directories"
    );
    for (mode, owner, name) in &entries {
        ensure!(owner == "0/0", "{name} is owned by {owner}, not root");
        ensure!(!mode[4..].contains('w'), "{name} is writable by others than root: {mode}");
    }
    let binary = std::fs::metadata(dir.join("layer").join(BINARY))?;
    eprintln!(
        "image {digest}: one layer of {} bytes, binary {} bytes",
        layers[0]["size"],
        binary.len()
    );
    Ok(())
}

fn binary_runs_from_the_image_root(dir: &Path) -> Result<()> {
    let out = command_output(Command::new(dir.join("run-from-image")).arg("--version"))?;
    ensure!(out.trim() == format!("kube-remediator {VERSION}"), "the image's binary says {out:?}");
    // Nothing in the root the binary could have loaded a library from.
    let mut found = Vec::new();
    walk(&dir.join("rootfs"), &mut found)?;
    let root = dir.join("rootfs");
    let files: Vec<String> = found
        .iter()
        .filter_map(|p| p.strip_prefix(&root).ok().map(|p| p.display().to_string()))
        .collect();
    ensure!(files == [BINARY], "the image's root holds files {files:?}, not only the binary");
    Ok(())
}

fn krew_manifest_matches_the_plugin_archive(dir: &Path) -> Result<()> {
    let text = std::fs::read_to_string(dir.join("krew/remediator.yaml"))?;
    let manifest: Value = serde_json::to_value(yaml_serde::from_str::<yaml_serde::Value>(&text)?)?;
    ensure!(
        manifest["kind"] == "Plugin" && manifest["metadata"]["name"] == "remediator",
        "{manifest}"
    );
    ensure!(
        manifest["spec"]["version"] == format!("v{VERSION}"),
        "version {}",
        manifest["spec"]["version"]
    );
    let platforms = manifest["spec"]["platforms"].as_array().context("no platforms")?;
    // The archives the build produced, one per platform.
    let mut built: Vec<String> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .filter(|n| n.starts_with("kubectl-remediator_") && n.ends_with(".tar.gz"))
        .collect();
    built.sort();
    let mut named = Vec::new();
    for platform in platforms {
        let os = str_at(platform, "/selector/matchLabels/os");
        let arch = str_at(platform, "/selector/matchLabels/arch");
        let archive = format!("kubectl-remediator_v{VERSION}_{os}_{arch}.tar.gz");
        let uri = str_at(platform, "/uri");
        ensure!(uri.ends_with(&format!("/v{VERSION}/{archive}")), "{os}/{arch}: uri {uri}");
        let path = dir.join(&archive);
        ensure!(path.is_file(), "{os}/{arch}: the build produced no {archive} (it made {built:?})");
        let sha = command_output(Command::new("sha256sum").arg(&path))?;
        let sha = sha.split_whitespace().next().unwrap_or_default();
        ensure!(
            platform["sha256"] == sha,
            "{archive}: sha256 {} in the manifest, {sha} built",
            platform["sha256"]
        );
        ensure!(platform["bin"] == "kubectl-remediator", "bin {}", platform["bin"]);
        let listing = command_output(Command::new("tar").arg("-tzf").arg(&path))?;
        for file in platform["files"].as_array().into_iter().flatten() {
            let from = str_at(file, "/from");
            ensure!(listing.lines().any(|l| l == from), "{archive} has no {from}: {listing}");
        }
        named.push(archive);
    }
    named.sort();
    ensure!(named == built, "the manifest names {named:?}, the build produced {built:?}");

    // The archive's binary is the image's, and answers as a kubectl plugin.
    let unpacked = dir.join("krew/unpacked");
    std::fs::create_dir_all(&unpacked)?;
    command_output(
        Command::new("tar").arg("-xzf").arg(dir.join(&named[0])).arg("-C").arg(&unpacked),
    )?;
    let plugin = unpacked.join("kubectl-remediator");
    ensure!(
        std::fs::read(&plugin)? == std::fs::read(dir.join("layer").join(BINARY))?,
        "the plugin's binary is not the image's"
    );
    let help = command_output(Command::new(&plugin).arg("--help"))?;
    ensure!(help.contains("kubectl remediator"), "as kubectl-remediator its help says:\n{help}");
    Ok(())
}

// ----- helpers ---------------------------------------------------------------------------------

/// What the Dockerfile's runtime stage sets.
struct Dockerfile {
    user: String,
    entrypoint: Value,
    cmd: Value,
    port: String,
    labels: BTreeMap<String, String>,
}

fn dockerfile() -> Result<Dockerfile> {
    let text = std::fs::read_to_string(repo_root().join("Dockerfile"))?;
    let joined = text.replace("\\\n", " ");
    let runtime = joined.rsplit_once("\nFROM ").map(|(_, r)| r).context("no FROM")?;
    let mut file = Dockerfile {
        user: String::new(),
        entrypoint: Value::Null,
        cmd: Value::Null,
        port: String::new(),
        labels: BTreeMap::new(),
    };
    for line in runtime.lines().map(str::trim).filter(|l| !l.starts_with('#')) {
        let (keyword, rest) = line.split_once(' ').unwrap_or((line, ""));
        match keyword {
            "USER" => file.user = rest.trim().to_string(),
            "ENTRYPOINT" => file.entrypoint = serde_json::from_str(rest)?,
            "CMD" => file.cmd = serde_json::from_str(rest)?,
            "EXPOSE" => file.port = rest.trim().to_string(),
            "LABEL" => file.labels = labels(rest)?,
            _ => {}
        }
    }
    Ok(file)
}

/// `key="value" key="value"` of a LABEL instruction.
fn labels(mut rest: &str) -> Result<BTreeMap<String, String>> {
    let mut labels = BTreeMap::new();
    loop {
        rest = rest.trim_start();
        if rest.is_empty() {
            return Ok(labels);
        }
        let (key, after) = rest.split_once("=\"").context("LABEL key=\"value\" expected")?;
        let (value, after) = after.split_once('"').context("unterminated LABEL value")?;
        labels.insert(key.to_string(), value.to_string());
        rest = after;
    }
}

pub(crate) fn blob(layout: &Path, digest: &str) -> PathBuf {
    layout.join("blobs").join(digest.replacen(':', "/", 1))
}

pub(crate) fn read_json(path: &Path) -> Result<Value> {
    let text = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_slice(&text).with_context(|| format!("parsing {}", path.display()))
}

/// Every file (not directory) under `dir`.
fn walk(dir: &Path, found: &mut Vec<PathBuf>) -> Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)?.collect::<std::io::Result<_>>()?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let path = entry.path();
        if entry.file_type()?.is_dir() {
            walk(&path, found)?;
        } else {
            found.push(path);
        }
    }
    Ok(())
}
