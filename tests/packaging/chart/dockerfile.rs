//! `chart-dockerfile`: the Dockerfile builds what `tools/image` builds and the chart runs (the
//! same static build command, with the same cargo-auditable, on the same files, a new enough
//! Rust, an empty base, the user, port and binary path the chart expects). `image-config` checks the image `tools/image` made
//! against the Dockerfile's runtime stage.

use anyhow::{Context, Result, ensure};

use super::{DEFAULT_RELEASE, documents, one};
use crate::support::chart::Helm;
use crate::support::cluster::repo_root;

pub(super) fn dockerfile_builds_what_the_chart_runs() -> Result<()> {
    let read = |file: &str| {
        std::fs::read_to_string(repo_root().join(file)).with_context(|| format!("reading {file}"))
    };
    let dockerfile = read("Dockerfile")?;
    let instructions: Vec<String> = dockerfile
        .replace("\\\n", " ")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(String::from)
        .collect();
    let with = |keyword: &str| -> Vec<&str> {
        instructions
            .iter()
            .filter_map(|l| l.strip_prefix(keyword).and_then(|rest| rest.strip_prefix(' ')))
            .map(str::trim)
            .collect()
    };

    // The build: the command tools/image runs, on the files it copies, with a Rust at least as
    // new as Cargo.toml's rust-version.
    const BUILD: &str = r#"RUSTFLAGS="-C target-feature=+crt-static" cargo auditable build --locked --release --target "$target" --bin kube-remediator"#;
    ensure!(with("RUN").iter().any(|r| r.contains(BUILD)), "the Dockerfile does not run {BUILD}");
    ensure!(read("tools/image")?.contains(BUILD), "tools/image does not run {BUILD}");
    let auditable = with("ARG")
        .into_iter()
        .find_map(|a| a.strip_prefix("CARGO_AUDITABLE_VERSION="))
        .context("no ARG CARGO_AUDITABLE_VERSION=")?;
    ensure!(
        read("tools/image")?.contains(&format!("cargo_tool cargo-auditable {auditable})")),
        "the Dockerfile installs cargo-auditable {auditable}, tools/image another"
    );
    let copies: Vec<&str> = with("COPY").into_iter().filter(|c| !c.starts_with("--from")).collect();
    ensure!(
        copies == ["Cargo.toml Cargo.lock ./", "src ./src"],
        "the build copies {copies:?}; tools/image copies Cargo.toml, Cargo.lock and src/"
    );
    let rust = with("ARG")
        .into_iter()
        .find_map(|a| a.strip_prefix("RUST_VERSION="))
        .context("no ARG RUST_VERSION=")?;
    let need = env!("CARGO_PKG_RUST_VERSION");
    ensure!(
        version_at_least(rust, need),
        "the Dockerfile builds with Rust {rust}, Cargo.toml's rust-version is {need}"
    );

    // The runtime image: the user, port and binary the chart expects.
    let docs = documents(&Helm::new()?.template(DEFAULT_RELEASE, DEFAULT_RELEASE, &[])?)?;
    let pod = &one(&docs, "Deployment")?["spec"]["template"]["spec"];
    let user =
        format!("{}:{}", pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsGroup"]);
    ensure!(
        with("USER").last() == Some(&user.as_str()),
        "USER {:?}, the chart runs as {user}",
        with("USER")
    );
    ensure!(user != "0:0" && !user.starts_with("0:"), "the image runs as root");
    let port = pod["containers"][0]["ports"][0]["containerPort"].to_string();
    ensure!(
        with("EXPOSE") == [port.as_str()],
        "EXPOSE {:?}, the chart's port is {port}",
        with("EXPOSE")
    );
    ensure!(
        with("ENTRYPOINT") == [r#"["/usr/local/bin/kube-remediator"]"#],
        "ENTRYPOINT {:?}: the chart passes arguments only, and NOTES.txt runs `kube-remediator \
         plan` from the PATH",
        with("ENTRYPOINT")
    );
    ensure!(
        with("RUN").iter().any(|r| r.ends_with(" /out/usr/local/bin/kube-remediator"))
            && with("COPY").contains(&"--from=build /out/ /"),
        "the binary is not copied to /usr/local/bin"
    );
    // Nothing beside the static binary, as tools/image builds it.
    let runtime = with("FROM").last().copied().unwrap_or_default();
    ensure!(runtime == "scratch", "the runtime stage is FROM {runtime}, not scratch");
    Ok(())
}

/// Whether the dotted version `have` is at least `need` (`1.95` >= `1.89`).
fn version_at_least(have: &str, need: &str) -> bool {
    let parse = |v: &str| -> Vec<u64> { v.split('.').map(|p| p.parse().unwrap_or(0)).collect() };
    parse(have) >= parse(need)
}
