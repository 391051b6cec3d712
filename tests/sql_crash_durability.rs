//! Crash durability: a child process persists from 1 and from 100 actors, printing each
//! acknowledged (persistence id, seq_nr) as it arrives, and is killed with SIGKILL mid-run. A
//! fresh recovery afterwards holds every acknowledged event at its sequence number, with no
//! duplicate and no gap. On SQLite and on PostgreSQL.

mod child;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};

use actix_persistence_sql::test_util::TestDatabase;
use child::{Append, Appender, LastSeqNr};

child_entry_point!(run_child);

/// The child: `actors` appenders (`crash-0`, `crash-1`, ...) each persist one event after the
/// other, forever; every acknowledged one is printed as `ACK <pid> <seq_nr>`.
fn run_child(role: &str, url: &str, actors: &str) {
    assert_eq!(role, "persist-until-killed", "unknown child role");
    let actors: usize = actors.parse().expect("a number of actors");
    actix_persistence::actix::System::new().block_on(async {
        let journal = child::journal(url).await;
        let writers: Vec<_> = (0..actors)
            .map(|i| {
                let pid = format!("crash-{i}");
                let actor = Appender::start(&journal, &pid, "child");
                async move {
                    loop {
                        match actor.send(Append).await {
                            Ok(Ok(seq_nr)) => child::say(&format!("ACK {pid} {seq_nr}")),
                            other => panic!("{pid}: a persist failed: {other:?}"),
                        }
                    }
                }
            })
            .collect();
        futures::future::join_all(writers).await;
    });
}

/// Runs the child with `actors` actors, SIGKILLs it once `acks` events were acknowledged, and
/// returns every acknowledgement it printed, per persistence id.
async fn persist_until_killed(url: &str, actors: usize, acks: usize) -> BTreeMap<String, Vec<u64>> {
    let url = url.to_owned();
    tokio::task::spawn_blocking(move || {
        let mut process = child::spawn("persist-until-killed", &url, &actors.to_string());
        let stdout = process.stdout.take().expect("piped stdout");
        let mut lines = BufReader::new(stdout).lines().map_while(Result::ok);
        let mut acked: BTreeMap<String, Vec<u64>> = BTreeMap::new();
        let mut record = |line: &str| {
            if let Some(ack) = child::after(line, "ACK ") {
                let (pid, seq_nr) = ack.split_once(' ').expect("ACK <pid> <seq_nr>");
                let seq_nr = seq_nr.parse().expect("a sequence number");
                acked.entry(pid.to_owned()).or_default().push(seq_nr);
                true
            } else {
                false
            }
        };
        let mut count = 0;
        for line in lines.by_ref() {
            if record(&line) {
                count += 1;
                if count == acks {
                    break;
                }
            }
        }
        assert_eq!(
            count, acks,
            "the child stopped before {acks} acknowledgements"
        );
        process.kill().expect("SIGKILL the child");
        // Acknowledgements already in the pipe were printed before the kill: they count too.
        for line in lines {
            record(&line);
        }
        let status = process.wait().expect("the child ends");
        assert!(
            !status.success(),
            "the child was killed, not finished: {status}"
        );
        acked
    })
    .await
    .expect("the child's thread")
}

/// Kills a child writing from `actors` actors mid-run, then checks a fresh recovery of every
/// id holds every acknowledged event at its sequence number, and only consecutive ones.
async fn every_acknowledged_event_survives_a_sigkill(url: &str, actors: usize, acks: usize) {
    let acked = persist_until_killed(url, actors, acks).await;
    let store = child::open(url).await;
    let journal = child::journal(url).await;
    for i in 0..actors {
        let pid = format!("crash-{i}");
        let stored = child::stored(&*store, &pid).await;
        let seq_nrs: Vec<u64> = stored.iter().map(|(seq_nr, _)| *seq_nr).collect();
        let expected: Vec<u64> = (1..=seq_nrs.len() as u64).collect();
        assert_eq!(
            seq_nrs, expected,
            "{pid}: consecutive from 1, no gap or duplicate"
        );
        for (seq_nr, payload) in &stored {
            assert_eq!(
                payload,
                &format!("child:{pid}:{seq_nr}"),
                "{pid} at {seq_nr}"
            );
        }
        let acknowledged = acked.get(&pid).cloned().unwrap_or_default();
        let unique: BTreeSet<_> = acknowledged.iter().collect();
        assert_eq!(
            unique.len(),
            acknowledged.len(),
            "{pid}: acknowledged once each"
        );
        if let Some(last) = acknowledged.iter().max() {
            assert!(
                *last <= seq_nrs.len() as u64,
                "{pid}: acknowledged up to {last}, but only {} stored",
                seq_nrs.len()
            );
        }
        // A fresh incarnation recovers exactly what is stored.
        let recovered = Appender::start(&journal, &pid, "parent");
        assert_eq!(
            recovered.send(LastSeqNr).await.expect("recovered"),
            seq_nrs.len() as u64,
            "{pid}: recovery's last sequence number"
        );
    }
    let total: usize = acked.values().map(Vec::len).sum();
    assert!(total >= acks, "{total} acknowledgements");
}

#[actix::test]
async fn sqlite_every_acknowledged_event_of_one_actor_survives_a_sigkill() {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("sqlite:{}", dir.path().join("journal.db").display());
    every_acknowledged_event_survives_a_sigkill(&url, 1, 200).await;
}

#[actix::test]
async fn sqlite_every_acknowledged_event_of_100_actors_survives_a_sigkill() {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("sqlite:{}", dir.path().join("journal.db").display());
    every_acknowledged_event_survives_a_sigkill(&url, 100, 1_000).await;
}

#[actix::test]
#[cfg_attr(
    not(has_database_url),
    ignore = "PostgreSQL test skipped: set DATABASE_URL to run it"
)]
async fn postgres_every_acknowledged_event_of_one_actor_survives_a_sigkill() {
    let Some(db) = TestDatabase::create().await else {
        return;
    };
    every_acknowledged_event_survives_a_sigkill(db.url(), 1, 200).await;
}

#[actix::test]
#[cfg_attr(
    not(has_database_url),
    ignore = "PostgreSQL test skipped: set DATABASE_URL to run it"
)]
async fn postgres_every_acknowledged_event_of_100_actors_survives_a_sigkill() {
    let Some(db) = TestDatabase::create().await else {
        return;
    };
    every_acknowledged_event_survives_a_sigkill(db.url(), 100, 1_000).await;
}
