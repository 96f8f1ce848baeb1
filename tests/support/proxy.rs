//! A TCP fault proxy on loopback between an operator and the API server: it passes bytes both
//! ways, with an added latency if asked, and on demand blackholes connections (stops forwarding
//! while keeping them open, as a half-open connection or a network silently dropping packets
//! does) or cuts them.
//!
//! Our own, on tokio, rather than a Go tool such as toxiproxy: the three faults the tests need
//! take a hundred lines here, where toxiproxy would be one more binary to build from its module
//! and to drive over its HTTP API. TLS passes through untouched (the API server's certificate
//! names 127.0.0.1, which the proxy also listens on).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// What one connection does with the bytes it receives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flow {
    Pass,
    /// Swallowed, in both directions, with the sockets left open.
    Blackholed,
    /// Closed.
    Cut,
}

#[derive(Default)]
struct Shared {
    /// Whether connections accepted from now on are blackholed from their first byte.
    blackhole_new: bool,
    connections: Vec<watch::Sender<Flow>>,
    /// Added before each chunk is passed on, in both directions, on every connection.
    latency: std::time::Duration,
}

/// A running proxy; dropping it cuts every connection and stops listening.
pub struct FaultProxy {
    pub addr: SocketAddr,
    shared: Arc<Mutex<Shared>>,
    accept: JoinHandle<()>,
}

impl FaultProxy {
    /// Listens on a free loopback port and forwards every connection to `upstream`.
    pub async fn start(upstream: SocketAddr) -> Result<FaultProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Mutex::new(Shared::default()));
        let accept = tokio::spawn(accept_loop(listener, upstream, shared.clone()));
        Ok(FaultProxy { addr, shared, accept })
    }

    /// Blackholes every open connection, and (`new_too`) every one opened until [`Self::heal`].
    pub fn blackhole(&self, new_too: bool) {
        let mut shared = self.lock();
        shared.blackhole_new = new_too;
        for flow in &shared.connections {
            flow.send_if_modified(|f| std::mem::replace(f, Flow::Blackholed) != Flow::Blackholed);
        }
    }

    /// New connections pass again; the ones blackholed stay so, open and silent, as a half-open
    /// connection does until its owner gives up on it.
    pub fn heal(&self) {
        self.lock().blackhole_new = false;
    }

    /// Delays every chunk passed on from now on by `latency` (zero: none).
    pub fn set_latency(&self, latency: std::time::Duration) {
        self.lock().latency = latency;
    }

    /// Closes every open connection.
    pub fn cut_all(&self) {
        for flow in self.lock().connections.drain(..) {
            let _ = flow.send(Flow::Cut);
        }
    }

    /// How many connections the proxy accepted so far.
    pub fn connections(&self) -> usize {
        self.lock().connections.len()
    }

    /// Writes a copy of `kubeconfig` that reaches the API server through this proxy to `out`.
    pub fn kubeconfig(&self, kubeconfig: &Path, out: &Path) -> Result<()> {
        let text = std::fs::read_to_string(kubeconfig)?;
        let rewritten: Vec<String> = text
            .lines()
            .map(|line| match line.trim_start().strip_prefix("server: ") {
                Some(_) => format!("    server: https://{}", self.addr),
                None => line.to_string(),
            })
            .collect();
        std::fs::write(out, rewritten.join("\n") + "\n")?;
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut_all();
    }
}

/// The API server's address in a kubeconfig (`server: https://127.0.0.1:PORT`).
pub fn api_server_addr(kubeconfig: &Path) -> Result<SocketAddr> {
    let text = std::fs::read_to_string(kubeconfig)?;
    let server = text
        .lines()
        .find_map(|l| l.trim_start().strip_prefix("server: https://"))
        .context("no https server in the kubeconfig")?;
    Ok(server.trim().parse()?)
}

async fn accept_loop(listener: TcpListener, upstream: SocketAddr, shared: Arc<Mutex<Shared>>) {
    while let Ok((client, _)) = listener.accept().await {
        let Ok(server) = TcpStream::connect(upstream).await else { continue };
        let flow = {
            let mut shared = shared.lock().unwrap_or_else(|e| e.into_inner());
            let start = if shared.blackhole_new { Flow::Blackholed } else { Flow::Pass };
            let (tx, rx) = watch::channel(start);
            shared.connections.push(tx);
            rx
        };
        let (client_read, client_write) = client.into_split();
        let (server_read, server_write) = server.into_split();
        tokio::spawn(pump(client_read, server_write, flow.clone(), shared.clone()));
        tokio::spawn(pump(server_read, client_write, flow, shared.clone()));
    }
}

/// Copies `from` to `to` while the flow passes; swallows what arrives while blackholed; ends
/// (closing its half) when either side closes or the connection is cut. With a latency, each
/// chunk is passed on that long after it arrived, without holding back the ones behind it (a
/// delay line, not a slower link).
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    to: tokio::net::tcp::OwnedWriteHalf,
    mut flow: watch::Receiver<Flow>,
    shared: Arc<Mutex<Shared>>,
) {
    let (line, mut due) = tokio::sync::mpsc::unbounded_channel::<(tokio::time::Instant, Vec<u8>)>();
    let writer = tokio::spawn(async move {
        let mut to = to;
        while let Some((at, chunk)) = due.recv().await {
            tokio::time::sleep_until(at).await;
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
    });
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = tokio::select! {
            read = from.read(&mut buf) => match read {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            },
            changed = flow.changed() => {
                if changed.is_err() || *flow.borrow() == Flow::Cut {
                    writer.abort();
                    return;
                }
                continue;
            }
        };
        let current = *flow.borrow();
        match current {
            Flow::Pass => {
                let latency = shared.lock().unwrap_or_else(|e| e.into_inner()).latency;
                if line.send((tokio::time::Instant::now() + latency, buf[..n].to_vec())).is_err() {
                    break;
                }
            }
            Flow::Blackholed => {}
            Flow::Cut => {
                writer.abort();
                return;
            }
        }
    }
    // The reading side closed: what is in the line still goes out, then the write half closes.
    drop(line);
    let _ = writer.await;
}
