# syntax=docker/dockerfile:1
#
# The kube-remediator image: a release build of the binary on Debian 12, run as a non-root user
# on distroless (glibc and libgcc, no shell, no package manager).
#
#   docker build -t kube-remediator:0.1.0 .
#
# tools/test builds the same binary with the same command when KUBE_REMEDIATOR_RELEASE_BUILD=1
# (no container engine needed), and tests/e2e/chart/dockerfile.rs (chart-dockerfile) keeps this file in
# step with the Helm chart (user, port, binary path).

# At least Cargo.toml's rust-version.
ARG RUST_VERSION=1.95

FROM rust:${RUST_VERSION}-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
# The registry and the target directory are cached between builds (BuildKit); the binary is
# copied out in the same step, since cache mounts are not part of the image.
RUN --mount=type=cache,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,target=/src/target,sharing=locked \
    cargo build --locked --release --bin kube-remediator \
    && install -D -m 0755 target/release/kube-remediator /out/kube-remediator

# Same Debian release as the build stage, so the binary finds the glibc it was linked against.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/kube-remediator /usr/local/bin/kube-remediator
# distroless' nonroot user, by number so that the kubelet can check runAsNonRoot.
USER 65532:65532
# /metrics, /healthz, /readyz (kube-remediator run --metrics-addr 0.0.0.0:8080).
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/kube-remediator"]
CMD ["run"]
