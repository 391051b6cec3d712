//! The Actix system stopped (without `Persistence::shutdown`) while persistent actors have
//! writes in flight: after a restart in the same process, every acknowledged write is there,
//! no atomic write is half stored, and the actors persist again at once.

mod adversarial;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use actix_persistence::actix::System;
use adversarial::*;
use tokio::sync::Notify;

const ACTORS: usize = 8;
/// Acknowledged writes (of all actors) after which the system is stopped.
const STOP_AFTER: usize = 60;

fn pid(i: usize) -> String {
    format!("Acct|stop-{i}")
}

fn stopping_the_system_with_writes_in_flight_keeps_every_acknowledged_write_whole(kind: Kind) {
    let b = System::new().block_on(Backend::new(kind));
    let acked: Arc<Mutex<BTreeMap<String, u64>>> = Arc::default();
    {
        let round = 0;
        let sys = System::new();
        let acked_in = Arc::clone(&acked);
        sys.block_on(async {
            let p = b.open().await;
            let enough = Arc::new(Notify::new());
            let count = Arc::new(Mutex::new(0usize));
            for i in 0..ACTORS {
                let mut a = start_acct(&p, &pid(i));
                match a.note().await {
                    Note::Recovered(_) => {}
                    other => panic!("round {round}: {} did not recover: {other:?}", pid(i)),
                }
                let (acked, enough, count) = (
                    Arc::clone(&acked_in),
                    Arc::clone(&enough),
                    Arc::clone(&count),
                );
                actix::spawn(async move {
                    loop {
                        match a.addr.send(AddAll(vec![1, 2, 3], vec!["t".into()])).await {
                            Ok(Ok((seq_nr, _))) => {
                                acked.lock().expect("lock").insert(pid(i), seq_nr);
                                let mut n = count.lock().expect("lock");
                                *n += 1;
                                if *n == STOP_AFTER {
                                    enough.notify_one();
                                }
                            }
                            _ => return,
                        }
                    }
                });
            }
            within("enough acknowledged writes", enough.notified()).await;
            // Stopped while the other actors' writes are in flight; no shutdown.
            System::current().stop();
            std::mem::forget(p);
        });
        drop(sys);

        // Restart in the same process: recover every actor, check, persist once more.
        let sys = System::new();
        sys.block_on(async {
            let p = b.open().await;
            for i in 0..ACTORS {
                let pid = pid(i);
                let mut a = start_acct(&p, &pid);
                let recovered = match a.note().await {
                    Note::Recovered(n) => n,
                    other => panic!("round {round}: {pid} did not recover: {other:?}"),
                };
                let (last, state) = a.get().await;
                assert_eq!(last, recovered);
                let acked = acked.lock().expect("lock").get(&pid).copied().unwrap_or(0);
                assert!(
                    recovered >= acked,
                    "round {round}: {pid} acknowledged {acked}, recovered {recovered}"
                );
                assert_eq!(
                    recovered % 3,
                    0,
                    "round {round}: {pid}: a half-stored write"
                );
                let expected: Vec<(u64, i64)> = (1..=recovered)
                    .map(|s| (s, ((s - 1) % 3 + 1) as i64))
                    .collect();
                assert_eq!(state.applied, expected, "round {round}: {pid}");
                let next = a.add(&[10]).await.expect("persists after the restart");
                assert_eq!(next.0, recovered + 1, "round {round}: {pid}");
            }
            p.shutdown().await;
        });
        drop(sys);
    }
}

on_every_store_in_own_systems!(
    stopping_the_system_with_writes_in_flight_keeps_every_acknowledged_write_whole
);
