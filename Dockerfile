# syntax=docker/dockerfile:1
#
# The kube-remediator image: one fully static release binary (glibc linked statically,
# crt-static) in an otherwise empty image: no shell, no libraries, no package manager, run as
# the non-root user 65532, nothing written to the root filesystem.
#
#   docker build -t kube-remediator:0.1.0 .
#
# tools/image builds the same image without a container engine (the same build command on the
# same files, the layer assembled with crane), and tools/test checks and runs that image in CI.
# tests/packaging/chart/dockerfile.rs (chart-dockerfile) keeps this file in step with tools/image and
# the Helm chart (build command, cargo-auditable version, user, port, binary path, labels).
#
# What a static glibc binary cannot do: load NSS modules, so it resolves no host names through
# /etc/nsswitch.conf (the image has no /etc at all). It needs none in a pod, where it reaches the
# API server at KUBERNETES_SERVICE_HOST, an IP address.

# At least Cargo.toml's rust-version.
ARG RUST_VERSION=1.95
# The cargo-auditable tools/image builds with.
ARG CARGO_AUDITABLE_VERSION=0.7.7

FROM rust:${RUST_VERSION}-bookworm AS build
ARG CARGO_AUDITABLE_VERSION
# cargo-auditable embeds the dependency list in the binary (a .dep-v0 section), where cargo
# audit, trivy, grype and syft read it.
RUN --mount=type=cache,target=/usr/local/cargo/registry,sharing=locked \
    cargo install --locked "cargo-auditable@${CARGO_AUDITABLE_VERSION}"
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
# The registry and the target directory are cached between builds (BuildKit); the binary is
# copied out in the same step, since cache mounts are not part of the image. --target keeps
# crt-static away from build scripts and proc macros, which run on the build machine.
RUN --mount=type=cache,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,target=/src/target,sharing=locked \
    target="$(rustc -vV | sed -n 's/^host: //p')" \
    && RUSTFLAGS="-C target-feature=+crt-static" cargo auditable build --locked --release --target "$target" --bin kube-remediator \
    && install -D -m 0755 "target/$target/release/kube-remediator" /out/usr/local/bin/kube-remediator

FROM scratch
COPY --from=build /out/ /
# A user by number (there is no /etc/passwd), so that the kubelet can check runAsNonRoot.
USER 65532:65532
# /metrics, /healthz, /readyz (kube-remediator run --metrics-addr 0.0.0.0:8080).
EXPOSE 8080
LABEL org.opencontainers.image.title="kube-remediator" \
      org.opencontainers.image.description="Kubernetes operator that heals what Kubernetes leaves stuck when a kubelet stops answering" \
      org.opencontainers.image.source="https://github.com/kube-remediator/kube-remediator" \
      org.opencontainers.image.version="0.1.0" \
      org.opencontainers.image.licenses="Apache-2.0"
ENTRYPOINT ["/usr/local/bin/kube-remediator"]
CMD ["run"]
