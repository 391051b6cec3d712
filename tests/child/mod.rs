//! Child processes for tests that need a second OS process on the same database: the test
//! binary runs itself again with one test selected (`<name> --exact`) and environment variables
//! naming the child's role, database and persistence ids. That test (see
//! [`child_entry_point!`]) does nothing when the variables are absent, i.e. in a normal run.
#![allow(dead_code)]

use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use actix_persistence::actix::{Actor, ActorContext, Addr, Context, Handler, Message};
use actix_persistence::journal::{JournalActor, JournalConfig};
use actix_persistence::{
    start_recovery, EventSourced, JournalStore, PersistReply, PersistResult, PersistenceState,
    PersistentActor, PostgresJournal, PostgresJournalOptions, SqliteJournal, SqliteJournalOptions,
    MAX_SEQ_NR,
};
use futures::TryStreamExt;

/// The variable naming the child's role; its absence means "not a child".
pub const ROLE: &str = "AP_TEST_CHILD_ROLE";
/// The database URL the child opens.
pub const URL: &str = "AP_TEST_CHILD_URL";
/// A role-specific argument (a persistence id, a number of actors).
pub const ARG: &str = "AP_TEST_CHILD_ARG";

/// Defines the test `child_entry_point`, which runs `$run(role, url, arg)` in a child process
/// and does nothing in a normal test run.
#[macro_export]
macro_rules! child_entry_point {
    ($run:path) => {
        /// Not a test of its own: the entry point of the child processes other tests start.
        #[test]
        fn child_entry_point() {
            if let (Ok(role), Ok(url), Ok(arg)) = (
                std::env::var($crate::child::ROLE),
                std::env::var($crate::child::URL),
                std::env::var($crate::child::ARG),
            ) {
                $run(&role, &url, &arg);
            }
        }
    };
}

/// Starts this test binary again as a child in `role`, its stdout piped to the parent.
pub fn spawn(role: &str, url: &str, arg: &str) -> Child {
    let exe = std::env::current_exe().expect("the test binary's path");
    Command::new(exe)
        .args([
            "child_entry_point",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ROLE, role)
        .env(URL, url)
        .env(ARG, arg)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the child process")
}

/// Opens the journal `url` names (`sqlite:...` or `postgres:...`), migrating its schema.
pub async fn open(url: &str) -> Arc<dyn JournalStore> {
    if url.starts_with("sqlite:") {
        Arc::new(
            SqliteJournal::connect(&SqliteJournalOptions::new(url))
                .await
                .expect("open SQLite"),
        )
    } else {
        Arc::new(
            PostgresJournal::connect(&PostgresJournalOptions::new(url))
                .await
                .expect("open PostgreSQL"),
        )
    }
}

/// A journal actor over the journal `url` names.
pub async fn journal(url: &str) -> Addr<JournalActor> {
    JournalActor::start_with(open(url).await, JournalConfig::default())
}

/// The stored events of `pid`: (seq_nr, payload as text).
pub async fn stored(store: &dyn JournalStore, pid: &str) -> Vec<(u64, String)> {
    store
        .replay_messages(pid, 1, MAX_SEQ_NR, MAX_SEQ_NR)
        .map_ok(|e| {
            let text: String = serde_json::from_slice(&e.payload).expect("a JSON string");
            (e.seq_nr, text)
        })
        .try_collect()
        .await
        .expect("replay")
}

/// A persistent actor that appends `"<origin>:<pid>:<seq_nr>"` events.
pub struct Appender {
    pub persistence: PersistenceState<Self>,
    pub origin: &'static str,
}

impl Appender {
    /// Starts an appender of `pid` writing through `journal`.
    pub fn start(journal: &Addr<JournalActor>, pid: &str, origin: &'static str) -> Addr<Self> {
        Self::new(journal, pid, origin).start()
    }

    /// An appender of `pid`, not started yet.
    pub fn new(journal: &Addr<JournalActor>, pid: &str, origin: &'static str) -> Self {
        Appender {
            persistence: PersistenceState::new(journal.clone(), pid).expect("a valid id"),
            origin,
        }
    }
}

impl Actor for Appender {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        start_recovery(self, ctx);
    }
}

impl PersistentActor for Appender {
    fn persistence(&self) -> &PersistenceState<Self> {
        &self.persistence
    }
    fn persistence_mut(&mut self) -> &mut PersistenceState<Self> {
        &mut self.persistence
    }
}

impl EventSourced for Appender {
    type Event = String;

    fn apply(&mut self, _: &String) {}
}

/// Persist the next event; answers its sequence number.
#[derive(Message)]
#[rtype(result = "PersistResult<u64>")]
pub struct Append;

impl Handler<Append> for Appender {
    type Result = PersistReply<u64>;

    fn handle(&mut self, _: Append, ctx: &mut Context<Self>) -> Self::Result {
        let event = format!(
            "{}:{}:{}",
            self.origin,
            self.persistence_id(),
            self.last_seq_nr() + 1
        );
        self.persist(ctx, event, |act, _, _| act.last_seq_nr())
    }
}

/// The last sequence number, once recovered (the mailbox opens only then).
#[derive(Message)]
#[rtype(result = "u64")]
pub struct LastSeqNr;

impl Handler<LastSeqNr> for Appender {
    type Result = u64;

    fn handle(&mut self, _: LastSeqNr, _: &mut Context<Self>) -> u64 {
        self.last_seq_nr()
    }
}

/// Stop the actor.
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopAppender;

impl Handler<StopAppender> for Appender {
    type Result = ();

    fn handle(&mut self, _: StopAppender, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}

/// Prints one line to stdout and flushes it at once (the parent reads it as it arrives).
pub fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// What follows `tag` in a line the child printed (libtest may print its own text before it on
/// the same line).
pub fn after<'a>(line: &'a str, tag: &str) -> Option<&'a str> {
    line.find(tag).map(|at| line[at + tag.len()..].trim())
}
