//! The embedded default end to end: persist on SQLite, shut the actor system down, start a new
//! one on the same file, and get the state back.

use actix_persistence::actix::{Actor, Context, Handler, Message, System};
use actix_persistence::{
    EventSourced, PersistReply, PersistResult, Persistence, PersistenceState, PersistentActor,
    Settings,
};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct Appended(String);

#[derive(PersistentActor)]
struct Notebook {
    persistence: PersistenceState<Self>,
    lines: Vec<String>,
    recovered_last_seq_nr: Option<u64>,
}

impl EventSourced for Notebook {
    type Event = Appended;

    fn apply(&mut self, event: &Appended) {
        self.lines.push(event.0.clone());
    }

    fn on_recovery_completed(&mut self, last_seq_nr: u64, _: &mut Context<Self>) {
        self.recovered_last_seq_nr = Some(last_seq_nr);
    }
}

#[derive(Message)]
#[rtype(result = "PersistResult<usize>")]
struct Append(String);

impl Handler<Append> for Notebook {
    type Result = PersistReply<usize>;

    fn handle(&mut self, msg: Append, ctx: &mut Context<Self>) -> Self::Result {
        self.persist(ctx, Appended(msg.0), |notebook, _, _| notebook.lines.len())
    }
}

#[derive(Message)]
#[rtype(result = "(Vec<String>, Option<u64>, u64)")]
struct Read;

impl Handler<Read> for Notebook {
    type Result = actix::MessageResult<Read>;

    fn handle(&mut self, _: Read, _: &mut Context<Self>) -> Self::Result {
        actix::MessageResult((
            self.lines.clone(),
            self.recovered_last_seq_nr,
            self.last_seq_nr(),
        ))
    }
}

fn settings_for(file: &std::path::Path) -> Settings {
    let toml = format!(
        "[journal]\nplugin = \"sqlite\"\n[journal.sqlite]\nurl = \"sqlite:{}\"\n",
        file.display()
    );
    Settings::loader()
        .toml_str("test", &toml)
        .env_vars(Vec::<(String, String)>::new())
        .load()
        .expect("valid settings")
}

fn notebook(persistence: &Persistence, id: &str) -> actix::Addr<Notebook> {
    Notebook {
        persistence: persistence.state(id).expect("valid id"),
        lines: Vec::new(),
        recovered_last_seq_nr: None,
    }
    .start()
}

#[test]
fn state_persisted_on_sqlite_is_recovered_by_a_new_actor_system() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("journal.db");

    let first = System::new();
    let written = first.block_on({
        let settings = settings_for(&file);
        async move {
            let persistence = Persistence::start_with(settings).await.expect("start");
            let book = notebook(&persistence, "notebook/1 ünïcode");
            let mut count = 0;
            for line in ["alpha", "beta", "gamma"] {
                count = book
                    .send(Append(line.into()))
                    .await
                    .expect("mailbox")
                    .expect("stored");
            }
            let other = notebook(&persistence, "notebook/2");
            other
                .send(Append("elsewhere".into()))
                .await
                .expect("mailbox")
                .expect("stored");
            count
        }
    });
    assert_eq!(written, 3);
    drop(first);

    let second = System::new();
    let (lines, recovered, last) = second.block_on({
        let settings = settings_for(&file);
        async move {
            let persistence = Persistence::start_with(settings).await.expect("restart");
            let book = notebook(&persistence, "notebook/1 ünïcode");
            let state = book.send(Read).await.expect("mailbox");
            // The next event continues the sequence.
            book.send(Append("delta".into()))
                .await
                .expect("mailbox")
                .expect("stored");
            let after = book.send(Read).await.expect("mailbox");
            assert_eq!(after.2, 4, "the next event gets seq_nr 4");
            state
        }
    });
    assert_eq!(lines, vec!["alpha", "beta", "gamma"]);
    assert_eq!(recovered, Some(3));
    assert_eq!(last, 3);
}
