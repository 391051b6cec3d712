//! The local PostgreSQL server of the benchmarks: a database per run (created and dropped),
//! and a monitor of its connections and backend CPU.

use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use sqlx::{Connection, PgConnection};

use crate::sys;

/// Where the server is.
#[derive(Debug, Clone)]
pub struct PgServer {
    /// Directory of its Unix socket (admin connections, pgbench, the group-commit runs).
    pub socket_dir: String,
    /// Its TCP address (upstream of the fault proxy).
    pub tcp: SocketAddr,
    /// The user (a superuser that may create databases; no password).
    pub user: String,
}

static NEXT_DB: AtomicU64 = AtomicU64::new(0);

impl PgServer {
    /// URL of `database` over the Unix socket.
    pub fn socket_url(&self, database: &str) -> String {
        format!(
            "postgres:///{database}?host={}&user={}",
            self.socket_dir, self.user
        )
    }

    /// URL of `database` at a TCP address (the proxy's).
    pub fn tcp_url(&self, addr: SocketAddr, database: &str) -> String {
        format!("postgres://{}@{addr}/{database}", self.user)
    }

    /// A fresh database name, unique in this process (lowercase, safe to splice into SQL).
    pub fn fresh_name(&self, what: &str) -> String {
        format!(
            "apbench_{}_{}_{}",
            what.replace(|c: char| !c.is_ascii_alphanumeric(), "_")
                .to_ascii_lowercase(),
            std::process::id(),
            NEXT_DB.fetch_add(1, Ordering::Relaxed)
        )
    }

    async fn admin(&self) -> Result<PgConnection, sqlx::Error> {
        PgConnection::connect(&self.socket_url("postgres")).await
    }

    /// Creates `database` (dropping a leftover of the same name first).
    ///
    /// # Errors
    /// When the server cannot be reached or refuses.
    pub async fn create_database(&self, database: &str) -> Result<(), sqlx::Error> {
        let mut admin = self.admin().await?;
        sqlx::raw_sql(&format!("DROP DATABASE IF EXISTS {database} WITH (FORCE)"))
            .execute(&mut admin)
            .await?;
        sqlx::raw_sql(&format!("CREATE DATABASE {database}"))
            .execute(&mut admin)
            .await?;
        admin.close().await
    }

    /// Drops `database`, ending its sessions.
    ///
    /// # Errors
    /// When the server cannot be reached or refuses.
    pub async fn drop_database(&self, database: &str) -> Result<(), sqlx::Error> {
        let mut admin = self.admin().await?;
        sqlx::raw_sql(&format!("DROP DATABASE IF EXISTS {database} WITH (FORCE)"))
            .execute(&mut admin)
            .await?;
        admin.close().await
    }

    /// Whether the server answers.
    pub async fn reachable(&self) -> bool {
        match self.admin().await {
            Ok(conn) => {
                let _ = conn.close().await;
                true
            }
            Err(_) => false,
        }
    }
}

/// What the monitor saw.
#[derive(Debug, Clone, Copy, Default)]
pub struct MonitorReport {
    /// Most connections to the database at one sample.
    pub max_connections: u64,
    /// Mean over the samples.
    pub mean_connections: f64,
    /// Samples taken.
    pub samples: u64,
    /// CPU time of the database's backend processes between start and stop.
    pub backend_cpu: Duration,
}

/// Samples `pg_stat_activity` for one database every `interval` (on its own connection over
/// the Unix socket, outside any proxy), and the CPU time of its backends from `/proc`.
pub struct Monitor {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    report: Rc<RefCell<MonitorReport>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Monitor {
    /// Starts sampling `database` on the current runtime.
    ///
    /// # Errors
    /// When the monitor's connection cannot be opened.
    pub async fn start(
        server: &PgServer,
        database: &str,
        interval: Duration,
    ) -> Result<Self, sqlx::Error> {
        let mut conn = PgConnection::connect(&server.socket_url("postgres")).await?;
        let database = database.to_owned();
        let report = Rc::new(RefCell::new(MonitorReport::default()));
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let shared = Rc::clone(&report);
        let task = actix::spawn(async move {
            let mut total = 0u64;
            let start_cpu = backend_cpu(&mut conn, &database).await;
            let mut last_cpu = start_cpu.clone();
            loop {
                let count: Result<i64, _> =
                    sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE datname = $1")
                        .bind(&database)
                        .fetch_one(&mut conn)
                        .await;
                if let Ok(count) = count {
                    let count = u64::try_from(count).unwrap_or(0);
                    total += count;
                    let mut r = shared.borrow_mut();
                    r.samples += 1;
                    r.max_connections = r.max_connections.max(count);
                    r.mean_connections = total as f64 / r.samples as f64;
                }
                // Backends may come and go: keep the last CPU reading of each.
                for (pid, cpu) in backend_cpu(&mut conn, &database).await {
                    match last_cpu.iter_mut().find(|(p, _)| *p == pid) {
                        Some(entry) => entry.1 = cpu,
                        None => last_cpu.push((pid, cpu)),
                    }
                }
                let used: Duration = last_cpu
                    .iter()
                    .map(|(pid, cpu)| {
                        let before = start_cpu
                            .iter()
                            .find(|(p, _)| p == pid)
                            .map(|(_, c)| *c)
                            .unwrap_or_default();
                        cpu.saturating_sub(before)
                    })
                    .sum();
                shared.borrow_mut().backend_cpu = used;
                tokio::select! {
                    _ = tokio::time::sleep(interval) => {}
                    _ = &mut stopped => break,
                }
            }
            let _ = conn.close().await;
        });
        Ok(Monitor {
            stop: Some(stop),
            report,
            task: Some(task),
        })
    }

    /// Stops sampling and returns what it saw.
    pub async fn stop(mut self) -> MonitorReport {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        *self.report.borrow()
    }
}

/// (pid, CPU so far) of every backend connected to `database`.
async fn backend_cpu(conn: &mut PgConnection, database: &str) -> Vec<(i32, Duration)> {
    let pids: Vec<i32> = sqlx::query_scalar("SELECT pid FROM pg_stat_activity WHERE datname = $1")
        .bind(database)
        .fetch_all(conn)
        .await
        .unwrap_or_default();
    pids.into_iter()
        .filter_map(|pid| Some((pid, sys::pid_cpu(pid)?)))
        .collect()
}
