//! Logging set-up: human-readable text by default, JSON lines for log pipelines.

use tracing_subscriber::{EnvFilter, fmt, prelude::*};

/// How log lines are written to stderr.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Installs the global tracing subscriber. `filter` uses the `RUST_LOG` syntax
/// (for example `info,kube_remediator=debug`). Calling it twice is harmless.
pub fn init(format: LogFormat, filter: &str) {
    let filter = EnvFilter::try_new(filter).unwrap_or_else(|_| EnvFilter::new("info"));
    let registry = tracing_subscriber::registry().with(filter);
    let _ = match format {
        LogFormat::Text => registry.with(fmt::layer().with_writer(std::io::stderr)).try_init(),
        LogFormat::Json => registry
            .with(fmt::layer().json().flatten_event(true).with_writer(std::io::stderr))
            .try_init(),
    };
}
