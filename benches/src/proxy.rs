//! A TCP latency fault between the app and the database: a small proxy on 127.0.0.1 that
//! holds back a random share of the chunks it forwards (in both directions).
//!
//! Why not `noxious` (the Rust port of Toxiproxy): its latency toxic delays *every* chunk of a
//! connection (plus jitter), and its `toxicity` is drawn once per connection, so with a pool of
//! 10 long-lived connections it can delay all traffic of one or two connections, not ~1 % of
//! all traffic. This proxy draws per chunk. A held chunk also holds back every later chunk of
//! its direction on that connection (TCP is ordered), which is what a real network stall does.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Which chunks the proxy delays.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fault {
    /// Share of chunks delayed, in percent.
    pub percent: f64,
    /// Shortest delay.
    pub min: Duration,
    /// Longest delay (uniform in between).
    pub max: Duration,
    /// Seed of the draws (each connection and direction derives its own).
    pub seed: u64,
    /// A one-way delay of every chunk, in both directions, pipelined (a chunk leaves this long
    /// after it arrived, whatever the chunks before it): a network hop of `2 * latency`
    /// round trip. Zero: none.
    pub latency: Duration,
}

impl Fault {
    /// No fault: a plain proxy.
    pub fn none() -> Self {
        Fault {
            percent: 0.0,
            min: Duration::ZERO,
            max: Duration::ZERO,
            seed: 0,
            latency: Duration::ZERO,
        }
    }

    /// Only a round trip of `2 * latency` on every exchange (a database on another host).
    pub fn latency(latency: Duration) -> Self {
        Fault {
            latency,
            ..Fault::none()
        }
    }
}

/// Counters of a proxy.
#[derive(Debug, Default)]
pub struct ProxyStats {
    /// Connections accepted.
    pub connections: AtomicU64,
    /// Chunks forwarded.
    pub chunks: AtomicU64,
    /// Chunks delayed.
    pub delayed_chunks: AtomicU64,
    /// CPU time of the proxy thread, in microseconds, when it stopped.
    pub cpu_micros: AtomicU64,
}

/// A running proxy; dropping it stops the proxy (its thread ends).
pub struct FaultProxy {
    addr: SocketAddr,
    stats: Arc<ProxyStats>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FaultProxy {
    /// Starts a proxy on 127.0.0.1 (a free port) forwarding to `upstream`, on a thread and
    /// Tokio runtime of its own (so it stands apart from the app like a network hop).
    ///
    /// # Errors
    /// When the listener cannot be bound.
    pub fn start(upstream: SocketAddr, fault: Fault) -> std::io::Result<Self> {
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        std_listener.set_nonblocking(true)?;
        let addr = std_listener.local_addr()?;
        let stats = Arc::new(ProxyStats::default());
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let thread_stats = Arc::clone(&stats);
        let thread = std::thread::Builder::new()
            .name("fault-proxy".to_owned())
            .spawn(move || {
                crate::sys::set_realtime();
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("the proxy runtime starts");
                runtime.block_on(async {
                    let listener =
                        TcpListener::from_std(std_listener).expect("a bound std listener");
                    tokio::select! {
                        _ = accept_loop(listener, upstream, fault, Arc::clone(&thread_stats)) => {}
                        _ = stopped => {}
                    }
                });
                drop(runtime);
                let cpu = crate::sys::thread_cpu().as_micros() as u64;
                thread_stats.cpu_micros.store(cpu, Ordering::Relaxed);
            })?;
        Ok(FaultProxy {
            addr,
            stats,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The counters (the CPU time is filled in once the proxy stopped).
    pub fn stats(&self) -> &Arc<ProxyStats> {
        &self.stats
    }

    /// Stops the proxy and waits for its thread; returns its counters.
    pub fn stop(mut self) -> Arc<ProxyStats> {
        self.shutdown();
        Arc::clone(&self.stats)
    }

    fn shutdown(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shutdown();
    }
}

async fn accept_loop(
    listener: TcpListener,
    upstream: SocketAddr,
    fault: Fault,
    stats: Arc<ProxyStats>,
) {
    let mut connection = 0u64;
    loop {
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        connection += 1;
        stats.connections.fetch_add(1, Ordering::Relaxed);
        let stats = Arc::clone(&stats);
        let seed = fault
            .seed
            .wrapping_add(connection.wrapping_mul(0x9E37_79B9));
        tokio::spawn(async move {
            let Ok(server) = TcpStream::connect(upstream).await else {
                return;
            };
            let _ = client.set_nodelay(true);
            let _ = server.set_nodelay(true);
            let (client_read, client_write) = client.into_split();
            let (server_read, server_write) = server.into_split();
            if !fault.latency.is_zero() {
                let up = delay_pump(client_read, server_write, fault.latency, Arc::clone(&stats));
                let down = delay_pump(server_read, client_write, fault.latency, stats);
                tokio::select! {
                    _ = up => {}
                    _ = down => {}
                }
                return;
            }
            let up = pump(client_read, server_write, fault, seed, Arc::clone(&stats));
            let down = pump(server_read, client_write, fault, seed ^ 1, stats);
            // Either side closing ends the connection.
            tokio::select! {
                _ = up => {}
                _ = down => {}
            }
        });
    }
}

/// Copies chunks from `from` to `to`, each `latency` after it arrived; the reading goes on
/// meanwhile (the chunks in flight are the network's).
async fn delay_pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    latency: Duration,
    stats: Arc<ProxyStats>,
) {
    let (in_flight, mut arriving) = tokio::sync::mpsc::unbounded_channel();
    let reader = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match from.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            stats.chunks.fetch_add(1, Ordering::Relaxed);
            let due = tokio::time::Instant::now() + latency;
            if in_flight.send((due, buf[..n].to_vec())).is_err() {
                return;
            }
        }
    };
    let writer = async move {
        while let Some((due, chunk)) = arriving.recv().await {
            tokio::time::sleep_until(due).await;
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
    };
    // The writer ends once the reader's channel closes and every chunk is written.
    let _ = tokio::join!(reader, writer);
}

/// Copies chunks from `from` to `to`, holding back a `fault.percent` share of them.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    fault: Fault,
    seed: u64,
    stats: Arc<ProxyStats>,
) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut buf = vec![0u8; 64 * 1024];
    let min = fault.min.as_micros() as u64;
    let max = fault.max.as_micros().max(fault.min.as_micros()) as u64;
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        stats.chunks.fetch_add(1, Ordering::Relaxed);
        if fault.percent > 0.0 && rng.gen_bool((fault.percent / 100.0).min(1.0)) {
            stats.delayed_chunks.fetch_add(1, Ordering::Relaxed);
            let delay = Duration::from_micros(rng.gen_range(min..=max));
            tokio::time::sleep(delay).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forwards_bytes_both_ways() {
        let echo = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let upstream = echo.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            use std::io::{Read, Write};
            let (mut s, _) = echo.accept().unwrap();
            let mut buf = [0u8; 5];
            s.read_exact(&mut buf).unwrap();
            s.write_all(&buf).unwrap();
        });
        let proxy = FaultProxy::start(upstream, Fault::none()).unwrap();
        {
            use std::io::{Read, Write};
            let mut c = std::net::TcpStream::connect(proxy.addr()).unwrap();
            c.write_all(b"hello").unwrap();
            let mut buf = [0u8; 5];
            c.read_exact(&mut buf).unwrap();
            assert_eq!(&buf, b"hello");
        }
        server.join().unwrap();
        let stats = proxy.stop();
        assert_eq!(stats.connections.load(Ordering::Relaxed), 1);
        assert_eq!(stats.delayed_chunks.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn latency_delays_every_exchange_and_keeps_the_bytes_in_order() {
        let echo = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let upstream = echo.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            use std::io::{Read, Write};
            let (mut s, _) = echo.accept().unwrap();
            let mut buf = [0u8; 3];
            for _ in 0..3 {
                s.read_exact(&mut buf).unwrap();
                s.write_all(&buf).unwrap();
            }
        });
        let latency = Duration::from_millis(20);
        let proxy = FaultProxy::start(upstream, Fault::latency(latency)).unwrap();
        {
            use std::io::{Read, Write};
            let mut c = std::net::TcpStream::connect(proxy.addr()).unwrap();
            for word in [b"one", b"two", b"six"] {
                let sent = std::time::Instant::now();
                c.write_all(word).unwrap();
                let mut buf = [0u8; 3];
                c.read_exact(&mut buf).unwrap();
                assert_eq!(&buf, word);
                // There and back: the latency twice.
                assert!(sent.elapsed() >= 2 * latency, "{:?}", sent.elapsed());
            }
        }
        server.join().unwrap();
        let stats = proxy.stop();
        assert_eq!(stats.chunks.load(Ordering::Relaxed), 6);
    }
}
