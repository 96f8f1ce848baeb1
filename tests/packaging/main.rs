//! The release's packaging checked without a control plane: the Helm chart and what is
//! generated from it (`chart-*`, with the pinned `helm` and `promtool`), and the image and kubectl
//! plugin `tools/image` builds (`image-*`, ignored unless `$KUBE_REMEDIATOR_IMAGE` names them),
//! and the manual's and the README's links (`docs-links`). It runs in seconds.
//!
//! Run with `tools/test` (or `cargo test --test packaging`); filter like any cargo test
//! (`cargo test --test packaging -- chart-`). The same libtest-mimic harness as the end-to-end
//! tests, so the trials keep their names (`chart-lint`, `image-run`, ...).

// The packaging trials use a small part of the test support (the test binaries, helm, the RBAC
// table); the end-to-end tests, which include the same module without this allowance, keep it
// free of dead code.
#[path = "../support/mod.rs"]
#[allow(dead_code, unused_imports)]
mod support;

mod chart;
mod docs;
mod image;
mod sbom;

fn main() {
    let args = libtest_mimic::Arguments::from_args();
    let trials = [chart::trials(), docs::trials(), image::trials()].into_iter().flatten().collect();
    libtest_mimic::run(&args, trials).exit();
}
