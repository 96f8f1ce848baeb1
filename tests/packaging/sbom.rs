//! `image-sbom`: the image's bill of materials, two ways. `tools/image` writes a CycloneDX SBOM
//! (cargo-cyclonedx) beside the OCI layout, and the image's manifest names it by digest
//! (annotations `io.remediator.sbom.*`); the binary is built with cargo-auditable, so it carries
//! its dependency list in a `.dep-v0` section (zlib-compressed JSON), where scanners read it.
//! Both must list the binary's crates with Cargo.lock's versions: the package itself, each
//! dependency Cargo.toml names, and the same set of crates between them.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail, ensure};
use serde_json::Value;

use crate::image::{BINARY, VERSION, blob, read_json};
use crate::support::cluster::repo_root;

/// The annotations naming the SBOM on the image's manifest.
const SBOM_DIGEST: &str = "io.remediator.sbom.digest";
const SBOM_PATH: &str = "io.remediator.sbom.path";
const SBOM_MEDIA_TYPE: &str = "io.remediator.sbom.mediaType";

pub(crate) fn sbom_and_audit_section_list_our_crates(dir: &Path) -> Result<()> {
    let name = format!("kube-remediator-{VERSION}.cdx.json");
    let path = dir.join(&name);
    let sbom = read_json(&path)?;

    // The manifest names the file by digest.
    let layout = dir.join("oci");
    let index = read_json(&layout.join("index.json"))?;
    let manifest =
        read_json(&blob(&layout, index["manifests"][0]["digest"].as_str().unwrap_or_default()))?;
    let annotations = &manifest["annotations"];
    let digest = format!("sha256:{}", sha256(&path)?);
    ensure!(
        annotations[SBOM_DIGEST] == digest.as_str(),
        "{SBOM_DIGEST} {}, file {digest}",
        annotations[SBOM_DIGEST]
    );
    ensure!(annotations[SBOM_PATH] == name.as_str(), "{SBOM_PATH} {}", annotations[SBOM_PATH]);
    ensure!(
        annotations[SBOM_MEDIA_TYPE] == "application/vnd.cyclonedx+json",
        "{SBOM_MEDIA_TYPE} {}",
        annotations[SBOM_MEDIA_TYPE]
    );

    // The SBOM: CycloneDX, describing this package, its crates as Cargo.lock pins them.
    ensure!(sbom["bomFormat"] == "CycloneDX", "bomFormat {}", sbom["bomFormat"]);
    let subject = &sbom["metadata"]["component"];
    ensure!(
        subject["name"] == "kube-remediator" && subject["version"] == VERSION,
        "the SBOM describes {} {}",
        subject["name"],
        subject["version"]
    );
    let locked = lock_versions()?;
    let mut in_sbom = BTreeSet::new();
    for component in sbom["components"].as_array().into_iter().flatten() {
        let (crate_name, version) = (str_of(component, "name"), str_of(component, "version"));
        ensure!(
            locked.get(&crate_name).is_some_and(|v| v.contains(&version)),
            "the SBOM lists {crate_name} {version}, which Cargo.lock does not"
        );
        ensure!(
            str_of(component, "purl").starts_with(&format!("pkg:cargo/{crate_name}@{version}")),
            "{crate_name}: purl {}",
            component["purl"]
        );
        in_sbom.insert((crate_name, version));
    }

    // The binary's audit section: the same crates.
    let binary = std::fs::read(dir.join("layer").join(BINARY))?;
    let audit = audit_data(&binary)?;
    let mut in_binary = BTreeSet::new();
    for package in audit["packages"].as_array().into_iter().flatten() {
        let (crate_name, version) = (str_of(package, "name"), str_of(package, "version"));
        if package["root"] == true {
            ensure!(
                crate_name == "kube-remediator" && version == VERSION,
                "root {crate_name} {version}"
            );
            continue;
        }
        in_binary.insert((crate_name, version));
    }
    for dependency in direct_dependencies()? {
        let version = locked.get(&dependency).and_then(|v| v.first()).cloned().unwrap_or_default();
        let pinned = (dependency.clone(), version);
        ensure!(in_sbom.contains(&pinned), "the SBOM lacks {pinned:?}");
        ensure!(in_binary.contains(&pinned), "the binary's audit section lacks {pinned:?}");
    }
    let only_sbom: Vec<_> = in_sbom.difference(&in_binary).collect();
    let only_binary: Vec<_> = in_binary.difference(&in_sbom).collect();
    ensure!(
        only_sbom.is_empty() && only_binary.is_empty(),
        "the SBOM and the binary disagree: only in the SBOM {only_sbom:?}, only in the binary \
         {only_binary:?}"
    );
    eprintln!("image-sbom: {} crates in the SBOM and in the binary's .dep-v0", in_sbom.len());
    Ok(())
}

fn str_of(value: &Value, key: &str) -> String {
    value[key].as_str().unwrap_or_default().to_string()
}

/// Every package of Cargo.lock: name to versions.
fn lock_versions() -> Result<BTreeMap<String, Vec<String>>> {
    let lock = std::fs::read_to_string(repo_root().join("Cargo.lock"))?;
    let mut versions: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut name = None;
    for line in lock.lines() {
        if let Some(n) = line.strip_prefix("name = ") {
            name = Some(n.trim_matches('"').to_string());
        } else if let (Some(v), Some(n)) = (line.strip_prefix("version = "), name.take()) {
            versions.entry(n).or_default().push(v.trim_matches('"').to_string());
        }
    }
    Ok(versions)
}

/// The names in Cargo.toml's `[dependencies]`.
fn direct_dependencies() -> Result<Vec<String>> {
    let manifest = std::fs::read_to_string(repo_root().join("Cargo.toml"))?;
    let section = manifest.split("\n[dependencies]\n").nth(1).context("no [dependencies]")?;
    let names: Vec<String> = section
        .lines()
        .take_while(|l| !l.starts_with('['))
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once('=').map(|(n, _)| n.trim().to_string()))
        .filter(|n| !n.is_empty())
        .collect();
    ensure!(names.len() > 10, "Cargo.toml's dependencies: {names:?}");
    Ok(names)
}

fn sha256(path: &Path) -> Result<String> {
    let out = Command::new("sha256sum").arg(path).output().context("running sha256sum")?;
    ensure!(out.status.success(), "sha256sum {}", path.display());
    Ok(String::from_utf8_lossy(&out.stdout).split_whitespace().next().unwrap_or_default().into())
}

/// The JSON in the binary's `.dep-v0` section (an ELF64 little-endian file), inflated by
/// Python's zlib.
fn audit_data(elf: &[u8]) -> Result<Value> {
    let section = elf_section(elf, ".dep-v0")?.context("the binary has no .dep-v0 section")?;
    let mut python = Command::new("python3")
        .args([
            "-c",
            "import sys, zlib; sys.stdout.buffer.write(zlib.decompress(sys.stdin.buffer.read()))",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("running python3")?;
    python.stdin.take().context("python3's stdin")?.write_all(section)?;
    let out = python.wait_with_output()?;
    ensure!(out.status.success(), ".dep-v0 is not zlib: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).context(".dep-v0 is not JSON")
}

/// The contents of the named section of an ELF64 little-endian file.
fn elf_section<'a>(elf: &'a [u8], wanted: &str) -> Result<Option<&'a [u8]>> {
    let u16_at = |at: usize| -> Result<usize> {
        let bytes = elf.get(at..at + 2).context("truncated ELF")?;
        Ok(u16::from_le_bytes([bytes[0], bytes[1]]) as usize)
    };
    let u64_at = |at: usize| -> Result<usize> {
        let bytes = elf.get(at..at + 8).context("truncated ELF")?;
        Ok(u64::from_le_bytes(bytes.try_into()?) as usize)
    };
    if elf.get(..6) != Some(b"\x7fELF\x02\x01") {
        bail!("not an ELF64 little-endian file");
    }
    let (table, entry_size, count, names_index) =
        (u64_at(0x28)?, u16_at(0x3a)?, u16_at(0x3c)?, u16_at(0x3e)?);
    let header = |i: usize| table + i * entry_size;
    let names_offset = u64_at(header(names_index) + 0x18)?;
    for i in 0..count {
        let name_at = names_offset + u32_of(elf, header(i))?;
        let name = elf.get(name_at..).context("section name out of the file")?;
        let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
        if name == wanted.as_bytes() {
            let (offset, size) = (u64_at(header(i) + 0x18)?, u64_at(header(i) + 0x20)?);
            return Ok(Some(elf.get(offset..offset + size).context("section out of the file")?));
        }
    }
    Ok(None)
}

fn u32_of(bytes: &[u8], at: usize) -> Result<usize> {
    let b = bytes.get(at..at + 4).context("truncated ELF")?;
    Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
}
