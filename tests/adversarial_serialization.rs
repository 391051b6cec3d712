//! Serialization, schema evolution and snapshots, after bug reports filed against other
//! persistence libraries (Akka Persistence and its plugins, cqrs-es, NEventStore, Marten,
//! serde_json's own round-trip reports): events written by an older version of an actor's
//! event type, upcasting by manifest, serializer ids the reader does not know, events and
//! snapshots that serde_json writes but cannot read back, and typed queries over events they
//! cannot decode. On every store (in memory, SQLite, PostgreSQL), across restarts of the
//! "process" (a new `Persistence` over the same database).

mod adversarial;

use std::fmt::Debug;
use std::marker::PhantomData;

use actix_persistence::actix::{Actor, Context, Handler, Message, MessageResult};
use actix_persistence::query::Offset;
use actix_persistence::serialization::{
    from_json, to_json, SerializationError, SerializedEvent, JSON_SERIALIZER_ID,
};
use actix_persistence::snapshot::{SnapshotError, SnapshotMetadata};
use actix_persistence::{
    EnvelopeStreamExt, EventSourced, PersistError, PersistReply, PersistResult, Persistence,
    PersistenceState, PersistentActor, PersistentRepr, QueryError, Recovery, RecoveryError,
    SnapshotFailure, Snapshotting, StopReason, WriteRejection,
};
use adversarial::{within, Backend, Kind};
use futures::StreamExt;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

// ---------------------------------------------------------------------------------------------
// One actor for every version of an event type

/// One version of an actor's event type and how it is written and read.
trait Schema: Unpin + Send + 'static {
    type Ev: Serialize + DeserializeOwned + Clone + Debug + PartialEq + Unpin + Send + 'static;

    /// The stored form; serde_json (`to_json`) with `manifest` by default.
    fn serialize(event: &Self::Ev) -> Result<SerializedEvent, SerializationError> {
        Ok(SerializedEvent {
            payload: to_json(event)?,
            serializer_id: JSON_SERIALIZER_ID,
            manifest: Self::manifest(event),
        })
    }

    fn manifest(_: &Self::Ev) -> String {
        String::new()
    }

    /// Reads a stored event back; serde_json by default.
    fn deserialize(repr: &PersistentRepr) -> Result<Self::Ev, SerializationError> {
        from_json(repr.seq_nr, repr.serializer_id, &repr.payload)
    }

    fn tags(_: &Self::Ev) -> Vec<String> {
        Vec::new()
    }

    /// Whether the entity takes (and restores) snapshots.
    const SNAPSHOTS: bool = true;
}

/// What an entity reports through its hooks, in order.
#[derive(Debug, Clone)]
enum Note {
    Recovered(u64),
    RecoveryFailed(RecoveryError),
    Rejected(WriteRejection),
    SnapshotSaved(u64),
    SnapshotFailed(SnapshotError),
}

/// A persistent actor whose state is the list of events it applied, with the sequence number
/// each was applied at; its snapshot is that list.
struct Ent<S: Schema> {
    persistence: PersistenceState<Self>,
    applied: Vec<(u64, S::Ev)>,
    notes: mpsc::UnboundedSender<Note>,
    /// Commands handled (a failed recovery must let none through).
    commands: u64,
}

impl<S: Schema> Actor for Ent<S> {
    type Context = Context<Self>;
    fn started(&mut self, ctx: &mut Context<Self>) {
        actix_persistence::start_recovery(self, ctx);
    }
}

impl<S: Schema> PersistentActor for Ent<S> {
    fn persistence(&self) -> &PersistenceState<Self> {
        &self.persistence
    }
    fn persistence_mut(&mut self) -> &mut PersistenceState<Self> {
        &mut self.persistence
    }
}

impl<S: Schema> EventSourced for Ent<S> {
    type Event = S::Ev;

    fn apply(&mut self, event: &S::Ev) {
        let seq_nr = self.last_seq_nr();
        self.applied.push((seq_nr, event.clone()));
    }

    fn serialize_event(&self, event: &S::Ev) -> Result<SerializedEvent, SerializationError> {
        S::serialize(event)
    }

    fn deserialize_event(&self, repr: &PersistentRepr) -> Result<S::Ev, SerializationError> {
        S::deserialize(repr)
    }

    fn tags(&self, event: &S::Ev) -> Vec<String> {
        S::tags(event)
    }

    fn snapshotting() -> Option<Snapshotting<Self>> {
        if !S::SNAPSHOTS {
            return None;
        }
        Some(Snapshotting::json(
            |e: &Self| e.applied.clone(),
            |e: &mut Self, applied: Vec<(u64, S::Ev)>| e.applied = applied,
        ))
    }

    fn on_recovery_completed(&mut self, last_seq_nr: u64, _: &mut Context<Self>) {
        let _ = self.notes.send(Note::Recovered(last_seq_nr));
    }
    fn on_recovery_failure(&mut self, cause: &RecoveryError, _: &mut Context<Self>) {
        let _ = self.notes.send(Note::RecoveryFailed(cause.clone()));
    }
    fn on_persist_rejected(&mut self, cause: &WriteRejection, _: &mut Context<Self>) {
        let _ = self.notes.send(Note::Rejected(cause.clone()));
    }
    fn on_snapshot_saved(&mut self, metadata: &SnapshotMetadata, _: &mut Context<Self>) {
        let _ = self.notes.send(Note::SnapshotSaved(metadata.seq_nr));
    }
    fn on_snapshot_failure(&mut self, cause: &SnapshotError, _: &mut Context<Self>) {
        let _ = self.notes.send(Note::SnapshotFailed(cause.clone()));
    }
}

/// `persist_all` of the events (one atomic write); replies the last sequence number.
struct PersistAll<E>(Vec<E>);
impl<E: 'static> Message for PersistAll<E> {
    type Result = PersistResult<u64>;
}
impl<S: Schema> Handler<PersistAll<S::Ev>> for Ent<S> {
    type Result = PersistReply<u64>;
    fn handle(&mut self, msg: PersistAll<S::Ev>, ctx: &mut Context<Self>) -> Self::Result {
        self.commands += 1;
        self.persist_all(ctx, msg.0, |e, _, _| e.last_seq_nr())
    }
}

/// Save a snapshot now.
struct Snap;
impl Message for Snap {
    type Result = ();
}
impl<S: Schema> Handler<Snap> for Ent<S> {
    type Result = ();
    fn handle(&mut self, _: Snap, ctx: &mut Context<Self>) {
        self.commands += 1;
        self.save_snapshot(ctx);
    }
}

/// (last_seq_nr, applied)
struct Get<S>(PhantomData<S>);
impl<S: Schema> Message for Get<S> {
    type Result = (u64, Vec<(u64, S::Ev)>);
}
impl<S: Schema> Handler<Get<S>> for Ent<S> {
    type Result = MessageResult<Get<S>>;
    fn handle(&mut self, _: Get<S>, _: &mut Context<Self>) -> Self::Result {
        self.commands += 1;
        MessageResult((self.last_seq_nr(), self.applied.clone()))
    }
}

/// A started entity.
struct Started<S: Schema> {
    addr: actix::Addr<Ent<S>>,
    notes: mpsc::UnboundedReceiver<Note>,
    stopped: tokio::sync::oneshot::Receiver<StopReason>,
}

impl<S: Schema> Started<S> {
    async fn note(&mut self) -> Note {
        within("a note of the entity", self.notes.recv())
            .await
            .expect("the entity dropped its note sender")
    }

    async fn recovered(&mut self) -> u64 {
        match self.note().await {
            Note::Recovered(last) => last,
            other => panic!("expected a completed recovery, got {other:?}"),
        }
    }

    /// The recovery error, after which the entity must have stopped as a recovery failure,
    /// before handling any command.
    async fn recovery_failed(&mut self) -> RecoveryError {
        let error = match self.note().await {
            Note::RecoveryFailed(error) => error,
            other => panic!("expected a failed recovery, got {other:?}"),
        };
        assert_eq!(
            within("stop", &mut self.stopped)
                .await
                .expect("stop reason"),
            StopReason::RecoveryFailure
        );
        assert!(
            self.addr.send(Get::<S>(PhantomData)).await.is_err(),
            "a command reached an entity whose recovery failed"
        );
        error
    }

    async fn persist_all(&self, events: Vec<S::Ev>) -> PersistResult<u64> {
        within("PersistAll", self.addr.send(PersistAll(events)))
            .await
            .expect("mailbox")
    }

    /// `persist_all`, which must be stored; its last sequence number.
    async fn stored(&self, events: Vec<S::Ev>) -> u64 {
        self.persist_all(events).await.expect("stored")
    }

    async fn get(&self) -> (u64, Vec<(u64, S::Ev)>) {
        within("Get", self.addr.send(Get::<S>(PhantomData)))
            .await
            .expect("mailbox")
    }
}

fn start<S: Schema>(p: &Persistence, pid: &str) -> Started<S> {
    start_with::<S>(p, pid, |s| s)
}

fn start_with<S: Schema>(
    p: &Persistence,
    pid: &str,
    f: impl FnOnce(PersistenceState<Ent<S>>) -> PersistenceState<Ent<S>>,
) -> Started<S> {
    let (tx, notes) = mpsc::unbounded_channel();
    let mut state = f(p.state(pid).expect("valid id"));
    let stopped = state.watch_stop();
    let addr = Ent::<S> {
        persistence: state,
        applied: Vec::new(),
        notes: tx,
        commands: 0,
    }
    .start();
    Started {
        addr,
        notes,
        stopped,
    }
}

/// Persists `events` one atomic write each with a fresh entity of `S`, then stops it.
async fn write_with<S: Schema>(p: &Persistence, pid: &str, events: Vec<S::Ev>) -> u64 {
    let mut e = start::<S>(p, pid);
    let mut last = e.recovered().await;
    for event in events {
        last = e.persist_all(vec![event]).await.expect("stored");
    }
    last
}

/// The event stored at `seq_nr` could not be read: the recovery error names the persistence
/// id and the sequence number. Returns the serializer's error.
fn deserialize_error_at(error: &RecoveryError, pid: &str, at: u64) -> SerializationError {
    match error {
        RecoveryError::Deserialize {
            persistence_id,
            source,
        } if persistence_id == pid => {
            let seq_nr = match source {
                SerializationError::Deserialize { seq_nr, .. }
                | SerializationError::UnknownSerializer { seq_nr, .. } => *seq_nr,
                other => panic!("not a deserialization error: {other:?}"),
            };
            assert_eq!(seq_nr, at, "{error}");
            assert!(error.to_string().contains(pid), "{error}");
            assert!(
                error.to_string().contains(&format!("sequence number {at}")),
                "{error}"
            );
            source.clone()
        }
        other => panic!("expected a deserialization error of {pid}, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Versions of an account's events

/// Version 1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum AccountV1 {
    Opened { owner: String },
    Deposited { amount: i64 },
    Frozen,
}
struct V1;
impl Schema for V1 {
    type Ev = AccountV1;
    fn manifest(event: &AccountV1) -> String {
        match event {
            AccountV1::Opened { .. } => "Opened.v1",
            AccountV1::Deposited { .. } => "Deposited.v1",
            AccountV1::Frozen => "Frozen.v1",
        }
        .to_owned()
    }
}

/// Version 2: `Frozen` was removed (renamed `Locked`); `Deposited` gained a `currency` field
/// with a serde default, `Opened` a `branch` field without one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum AccountV2 {
    Opened {
        owner: String,
        branch: String,
    },
    Deposited {
        amount: i64,
        #[serde(default = "eur")]
        currency: String,
    },
    Locked,
}
fn eur() -> String {
    "EUR".to_owned()
}
struct V2;
impl Schema for V2 {
    type Ev = AccountV2;
}

/// Version 2 with an upcaster: events written as version 1 (manifest `*.v1`) are read as
/// version 1 and turned into version 2 (cqrs-es `EventUpcaster`, Akka's `EventAdapter`,
/// Marten's upcasting by event type name); version 2 events carry manifest `*.v2`.
struct V2Upcasting;
impl V2Upcasting {
    fn upcast(old: AccountV1) -> AccountV2 {
        match old {
            AccountV1::Opened { owner } => AccountV2::Opened {
                owner,
                branch: "head-office".to_owned(),
            },
            AccountV1::Deposited { amount } => AccountV2::Deposited {
                amount,
                currency: "GBP".to_owned(),
            },
            AccountV1::Frozen => AccountV2::Locked,
        }
    }

    fn decode(seq_nr: u64, event: &SerializedEvent) -> Result<AccountV2, SerializationError> {
        if event.manifest.ends_with(".v1") {
            from_json::<AccountV1>(seq_nr, event.serializer_id, &event.payload).map(Self::upcast)
        } else if event.manifest.ends_with(".v2") {
            from_json(seq_nr, event.serializer_id, &event.payload)
        } else {
            Err(SerializationError::Deserialize {
                seq_nr,
                reason: format!("unknown manifest {:?}", event.manifest),
            })
        }
    }
}
impl Schema for V2Upcasting {
    type Ev = AccountV2;
    fn manifest(event: &AccountV2) -> String {
        match event {
            AccountV2::Opened { .. } => "Opened.v2",
            AccountV2::Deposited { .. } => "Deposited.v2",
            AccountV2::Locked => "Locked.v2",
        }
        .to_owned()
    }
    fn deserialize(repr: &PersistentRepr) -> Result<AccountV2, SerializationError> {
        let event = SerializedEvent {
            payload: repr.payload.to_vec(),
            serializer_id: repr.serializer_id,
            manifest: repr.manifest.to_string(),
        };
        Self::decode(repr.seq_nr, &event)
    }
    fn tags(event: &AccountV2) -> Vec<String> {
        match event {
            AccountV2::Deposited { currency, .. } => vec![format!("deposit-{currency}")],
            _ => Vec::new(),
        }
    }
}

fn opened(owner: &str) -> AccountV1 {
    AccountV1::Opened {
        owner: owner.to_owned(),
    }
}

// ---------------------------------------------------------------------------------------------
// Schema evolution

/// An event whose variant the new version removed (renamed), stored in the middle of the
/// journal: recovery fails with a typed error naming the persistence id and the event's
/// sequence number, on_recovery_failure runs, the actor stops before any command and is never
/// left half-recovered; the old version still recovers everything (nothing was changed).
/// akka-persistence-cassandra #140 "Recovery does not fail on failed deserialization";
/// NEventStore #203 "Unknown discriminator value" (fails only on rehydration after restart).
async fn an_event_of_a_removed_variant_fails_recovery_naming_its_seq_nr(kind: Kind) {
    let b = Backend::new(kind).await;
    let pid = "Account|renamed";
    let p = b.open().await;
    let events = vec![
        AccountV1::Deposited { amount: 5 },
        AccountV1::Frozen,
        AccountV1::Deposited { amount: 7 },
    ];
    assert_eq!(write_with::<V1>(&p, pid, events.clone()).await, 3);
    p.shutdown().await;

    let p = b.open().await;
    let mut e = start::<V2>(&p, pid);
    let error = e.recovery_failed().await;
    let source = deserialize_error_at(&error, pid, 2);
    assert!(source.to_string().contains("Frozen"), "{source}");

    let mut old = start::<V1>(&p, pid);
    assert_eq!(old.recovered().await, 3);
    assert_eq!(
        old.get().await,
        (3, (1..).zip(events).collect::<Vec<_>>()),
        "the old version still reads every event"
    );
    within("shutdown", p.shutdown()).await;
}

/// A field added to an event: with a serde default, old events recover with the default; a
/// field added without one fails recovery at the first old event that lacks it.
/// serverlesstechnology/cqrs #23 (a payload missing a new field: `missing field` on replay).
async fn a_field_added_with_a_default_recovers_and_without_one_fails_at_the_first_old_event(
    kind: Kind,
) {
    let b = Backend::new(kind).await;
    let p = b.open().await;
    let with_default = "Account|field-default";
    let events = vec![
        AccountV1::Deposited { amount: 5 },
        AccountV1::Deposited { amount: -2 },
    ];
    write_with::<V1>(&p, with_default, events).await;
    let without_default = "Account|field-required";
    write_with::<V1>(
        &p,
        without_default,
        vec![AccountV1::Deposited { amount: 1 }, opened("ann")],
    )
    .await;
    p.shutdown().await;

    let p = b.open().await;
    let mut e = start::<V2>(&p, with_default);
    assert_eq!(e.recovered().await, 2);
    let deposit = |amount| AccountV2::Deposited {
        amount,
        currency: "EUR".to_owned(),
    };
    assert_eq!(e.get().await, (2, vec![(1, deposit(5)), (2, deposit(-2))]));
    // The new version goes on after the old events.
    assert_eq!(e.stored(vec![AccountV2::Locked]).await, 3);

    let mut e = start::<V2>(&p, without_default);
    let error = e.recovery_failed().await;
    let source = deserialize_error_at(&error, without_default, 2);
    assert!(
        source.to_string().contains("missing field `branch`"),
        "{source}"
    );
    within("shutdown", p.shutdown()).await;
}

/// A manifest stored with each event selects the upcaster: version 1 events are read as
/// version 1 and upcast, version 2 events as they are, in order, in recovery and in a typed
/// query decoding with the same function; tags computed from the event select only the new
/// deposits. serverlesstechnology/cqrs #80 and PR #81 (upcasters for replays); Akka
/// `EventAdapter` with manifests; akkadotnet/Akka.Persistence.MongoDB #57 (events of an older
/// release whose manifest was missing could not be loaded).
async fn a_manifest_selects_the_upcaster_in_recovery_and_in_typed_queries(kind: Kind) {
    let b = Backend::new(kind).await;
    let pid = "Account|upcast";
    let p = b.open().await;
    write_with::<V1>(
        &p,
        pid,
        vec![
            opened("ann"),
            AccountV1::Deposited { amount: 10 },
            AccountV1::Frozen,
        ],
    )
    .await;
    p.shutdown().await;

    let p = b.open().await;
    let mut e = start::<V2Upcasting>(&p, pid);
    assert_eq!(e.recovered().await, 3);
    let chf = AccountV2::Deposited {
        amount: 3,
        currency: "CHF".to_owned(),
    };
    assert_eq!(e.stored(vec![chf.clone()]).await, 4);
    let expected = vec![
        (
            1,
            AccountV2::Opened {
                owner: "ann".to_owned(),
                branch: "head-office".to_owned(),
            },
        ),
        (
            2,
            AccountV2::Deposited {
                amount: 10,
                currency: "GBP".to_owned(),
            },
        ),
        (3, AccountV2::Locked),
        (4, chf.clone()),
    ];
    assert_eq!(e.get().await, (4, expected.clone()));
    drop(e);

    let mut again = start::<V2Upcasting>(&p, pid);
    assert_eq!(again.recovered().await, 4);
    assert_eq!(again.get().await, (4, expected.clone()));

    let q = p.query().expect("query");
    let typed: Vec<(u64, AccountV2)> = within(
        "typed query",
        q.current_events_by_persistence_id(pid, 0, u64::MAX)
            .decode_with(V2Upcasting::decode)
            .map(|e| {
                let e = e.expect("decoded");
                (e.seq_nr, e.event)
            })
            .collect::<Vec<_>>(),
    )
    .await;
    assert_eq!(typed, expected);
    let manifests: Vec<String> = within(
        "raw query",
        q.current_events_by_persistence_id(pid, 0, u64::MAX)
            .map(|e| e.expect("envelope").event.manifest)
            .collect::<Vec<_>>(),
    )
    .await;
    assert_eq!(
        manifests,
        ["Opened.v1", "Deposited.v1", "Frozen.v1", "Deposited.v2"]
    );
    let by_tag: Vec<(String, u64, AccountV2)> = within(
        "query by tag",
        q.current_events_by_tag("deposit-CHF", Offset::NoOffset)
            .decode_with(V2Upcasting::decode)
            .map(|e| {
                let e = e.expect("decoded");
                (e.persistence_id.to_string(), e.seq_nr, e.event)
            })
            .collect::<Vec<_>>(),
    )
    .await;
    assert_eq!(by_tag, vec![(pid.to_owned(), 4, chf)]);
    within("shutdown", p.shutdown()).await;
}

// ---------------------------------------------------------------------------------------------
// Serializer ids and payloads the reader cannot read

/// Version 1 written by a serializer of its own (id 42, not JSON): the JSON reader's
/// `UnknownSerializer`.
struct V1Custom;
impl Schema for V1Custom {
    type Ev = AccountV1;
    fn serialize(event: &AccountV1) -> Result<SerializedEvent, SerializationError> {
        let mut payload = b"bin:".to_vec();
        payload.extend(to_json(event)?);
        Ok(SerializedEvent {
            payload,
            serializer_id: 42,
            manifest: "custom".to_owned(),
        })
    }
    fn deserialize(repr: &PersistentRepr) -> Result<AccountV1, SerializationError> {
        from_json(repr.seq_nr, JSON_SERIALIZER_ID, &repr.payload[4..])
    }
}

/// Writes JSON cut short under the JSON serializer id (a buggy serializer, a truncated row).
struct V1Truncating;
impl Schema for V1Truncating {
    type Ev = AccountV1;
    fn serialize(event: &AccountV1) -> Result<SerializedEvent, SerializationError> {
        let mut payload = to_json(event)?;
        if matches!(event, AccountV1::Frozen) {
            payload.truncate(payload.len() - 1);
        }
        Ok(SerializedEvent {
            payload,
            serializer_id: JSON_SERIALIZER_ID,
            manifest: String::new(),
        })
    }
}

/// An event of a serializer the reader does not know, and a payload that is not JSON: recovery
/// fails naming the id, the sequence number and the serializer; a typed query delivers the
/// events before it, then the decoding error, then ends: it neither skips the event silently
/// nor goes on past it. akka/akka-persistence-jdbc #95 "Any deserialization errors will
/// silently stop eventSource"; Akka's serializer-id mismatch on replay.
async fn an_unknown_serializer_id_or_truncated_payload_fails_recovery_and_ends_typed_queries(
    kind: Kind,
) {
    let b = Backend::new(kind).await;
    let custom = "Account|custom";
    let truncated = "Account|truncated";
    let p = b.open().await;
    let events = vec![
        AccountV1::Deposited { amount: 1 },
        AccountV1::Frozen,
        AccountV1::Deposited { amount: 2 },
    ];
    write_with::<V1Custom>(&p, custom, events.clone()).await;
    write_with::<V1Truncating>(&p, truncated, events.clone()).await;
    // The writer's own serializer reads its events back.
    let mut e = start::<V1Custom>(&p, custom);
    assert_eq!(e.recovered().await, 3);
    assert_eq!(
        e.get().await.1,
        (1..).zip(events.clone()).collect::<Vec<_>>()
    );
    drop(e);
    p.shutdown().await;

    let p = b.open().await;
    let mut e = start::<V1>(&p, custom);
    let error = e.recovery_failed().await;
    match deserialize_error_at(&error, custom, 1) {
        SerializationError::UnknownSerializer {
            serializer_id: 42,
            expected: JSON_SERIALIZER_ID,
            ..
        } => {}
        other => panic!("expected UnknownSerializer(42), got {other:?}"),
    }
    let mut e = start::<V1>(&p, truncated);
    let error = e.recovery_failed().await;
    deserialize_error_at(&error, truncated, 2);

    let q = p.query().expect("query");
    let items: Vec<Result<(u64, AccountV1), String>> = within(
        "typed query",
        q.current_events_by_persistence_id(truncated, 0, u64::MAX)
            .decode_json::<AccountV1>()
            .map(|item| match item {
                Ok(e) => Ok((e.seq_nr, e.event)),
                Err(QueryError::Decode {
                    persistence_id,
                    seq_nr,
                    ..
                }) => Err(format!("{persistence_id}@{seq_nr}")),
                Err(other) => Err(other.to_string()),
            })
            .collect::<Vec<_>>(),
    )
    .await;
    assert_eq!(
        items,
        vec![
            Ok((1, AccountV1::Deposited { amount: 1 })),
            Err(format!("{truncated}@2")),
        ]
    );
    let live_first = within(
        "live typed query",
        q.events_by_persistence_id(custom, 0, u64::MAX)
            .decode_json::<AccountV1>()
            .collect::<Vec<_>>(),
    )
    .await;
    assert_eq!(live_first.len(), 1, "the live stream ends at its error");
    match &live_first[0] {
        Err(QueryError::Decode {
            persistence_id,
            seq_nr: 1,
            source:
                SerializationError::UnknownSerializer {
                    serializer_id: 42, ..
                },
        }) if persistence_id == custom => {}
        other => panic!("expected the decoding error of event 1, got {other:?}"),
    }
    within("shutdown", p.shutdown()).await;
}

// ---------------------------------------------------------------------------------------------
// Snapshots of a changed state type

/// A snapshot of the old state type: recovery fails at the snapshot (naming the id and its
/// sequence number) instead of replaying from the start, since events under it may have been
/// deleted (Akka's default; akka/akka-core #21842 and PR #21848); a recovery that skips
/// snapshots and an upcasting reader recover from the events, and a new snapshot in the new
/// type is then preferred. akka/akka-core #30077 and #30234 (snapshot schema changed: fall back
/// to the events, only when asked for).
async fn a_snapshot_of_a_changed_state_type_fails_recovery_and_skipping_it_replays_the_events(
    kind: Kind,
) {
    let b = Backend::new(kind).await;
    let pid = "Account|snapshot-schema";
    let p = b.open().await;
    let mut e = start::<V1>(&p, pid);
    assert_eq!(e.recovered().await, 0);
    assert_eq!(e.stored(vec![opened("bo"), AccountV1::Frozen]).await, 2);
    e.addr.do_send(Snap);
    match e.note().await {
        Note::SnapshotSaved(2) => {}
        other => panic!("expected the snapshot at 2, got {other:?}"),
    }
    drop(e);
    p.shutdown().await;

    let p = b.open().await;
    let mut e = start::<V2Upcasting>(&p, pid);
    match e.recovery_failed().await {
        RecoveryError::Snapshot {
            persistence_id,
            reason,
            source,
        } => {
            assert_eq!(persistence_id, pid);
            assert!(reason.contains("snapshot at sequence number 2"), "{reason}");
            // Loaded, then not read back: the restore's error, typed.
            assert!(
                matches!(
                    *source,
                    SnapshotFailure::Restore(SerializationError::SnapshotDeserialize {
                        seq_nr: 2,
                        ..
                    })
                ),
                "{source:?}"
            );
        }
        other => panic!("expected a snapshot error, got {other:?}"),
    }

    let mut e = start_with::<V2Upcasting>(&p, pid, |s| {
        s.with_recovery(Recovery {
            from_snapshot: actix_persistence::snapshot::SnapshotSelectionCriteria::none(),
            ..Recovery::latest()
        })
    });
    assert_eq!(e.recovered().await, 2);
    let upcast = vec![
        (
            1,
            AccountV2::Opened {
                owner: "bo".to_owned(),
                branch: "head-office".to_owned(),
            },
        ),
        (2, AccountV2::Locked),
    ];
    assert_eq!(e.get().await, (2, upcast.clone()));
    e.addr.do_send(Snap);
    match e.note().await {
        Note::SnapshotSaved(2) => {}
        other => panic!("expected the new snapshot at 2 (replacing the old), got {other:?}"),
    }
    drop(e);
    let mut e = start::<V2Upcasting>(&p, pid);
    assert_eq!(e.recovered().await, 2);
    assert_eq!(e.get().await, (2, upcast));
    within("shutdown", p.shutdown()).await;
}

/// Version 1 without snapshots: an actor whose `EventSourced::snapshotting` is `None`.
struct V1NoSnapshots;
impl Schema for V1NoSnapshots {
    type Ev = AccountV1;
    const SNAPSHOTS: bool = false;
}

/// A snapshot in the store of an actor that (no longer) restores snapshots: recovery fails at
/// it instead of starting after it with the snapshot's sequence number and an empty state
/// (which then replays only the events after it: a partially recovered actor); with
/// `SnapshotSelectionCriteria::none` it replays every event. akka/akka-core #23469
/// "Eventsourced only recovers partially if offered snapshot is not handled".
async fn a_snapshot_the_actor_cannot_restore_never_leaves_it_partially_recovered(kind: Kind) {
    let b = Backend::new(kind).await;
    let pid = "Account|unhandled-snapshot";
    let p = b.open().await;
    let mut e = start::<V1>(&p, pid);
    assert_eq!(e.recovered().await, 0);
    assert_eq!(
        e.stored(vec![opened("cy"), AccountV1::Deposited { amount: 4 }])
            .await,
        2
    );
    e.addr.do_send(Snap);
    assert!(matches!(e.note().await, Note::SnapshotSaved(2)));
    assert_eq!(e.stored(vec![AccountV1::Frozen]).await, 3);
    drop(e);

    let mut e = start::<V1NoSnapshots>(&p, pid);
    match e.recovery_failed().await {
        RecoveryError::Snapshot {
            persistence_id,
            reason,
            source,
        } => {
            assert_eq!(persistence_id, pid);
            assert!(reason.contains("snapshot at sequence number 2"), "{reason}");
            // Loaded, then not read back: the restore's error, typed.
            assert!(
                matches!(
                    *source,
                    SnapshotFailure::Restore(SerializationError::SnapshotDeserialize {
                        seq_nr: 2,
                        ..
                    })
                ),
                "{source:?}"
            );
        }
        other => panic!("expected a snapshot error, got {other:?}"),
    }
    let mut e = start_with::<V1NoSnapshots>(&p, pid, |s| {
        s.with_recovery(Recovery {
            from_snapshot: actix_persistence::snapshot::SnapshotSelectionCriteria::none(),
            ..Recovery::latest()
        })
    });
    assert_eq!(e.recovered().await, 3);
    assert_eq!(
        e.get().await,
        (
            3,
            vec![
                (1, opened("cy")),
                (2, AccountV1::Deposited { amount: 4 }),
                (3, AccountV1::Frozen)
            ]
        )
    );
    within("shutdown", p.shutdown()).await;
}

// ---------------------------------------------------------------------------------------------
// Atomic writes with an event that cannot be serialized

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum Item {
    Ok(u32),
    #[serde(serialize_with = "refuse")]
    Refused(u32),
}
fn refuse<S: serde::Serializer>(_: &u32, _: S) -> Result<S::Ok, S::Error> {
    Err(serde::ser::Error::custom(
        "this item refuses to be serialized",
    ))
}
struct Items;
impl Schema for Items {
    type Ev = Item;
}

/// `persist_all` of three events whose second cannot be serialized: the whole atomic write is
/// rejected (nothing of it stored, no event applied, its continuation gets the rejection),
/// `on_persist_rejected` names the event that could not be serialized (`WriteRejection::seq_nr`
/// documented the write's first number, while the actor names the failing event, as
/// `tests/failure_handling.rs` pins for panicking tags; the docs now say so), the write keeps its numbers (Akka's `onPersistRejected`), and the next persist
/// works. akka/akka-core PR #17818 (atomic `persistAll`, rejections); akka-persistence-jdbc
/// #51/#52 and evolution-gaming/kafka-journal #924 (a serialization failure must be a
/// rejection of that write, not a failure); scullxbones/akka-persistence-mongo #90 (the other
/// events of a batch stored although one failed to serialize).
async fn a_persist_all_with_one_unserializable_event_stores_none_of_it(kind: Kind) {
    let b = Backend::new(kind).await;
    let pid = "Items|refused";
    let p = b.open().await;
    let mut e = start::<Items>(&p, pid);
    assert_eq!(e.recovered().await, 0);
    assert_eq!(e.stored(vec![Item::Ok(1)]).await, 1);
    match e
        .persist_all(vec![Item::Ok(2), Item::Refused(3), Item::Ok(4)])
        .await
    {
        Err(PersistError::Rejected(rejection)) => {
            assert_eq!(rejection.persistence_id, pid);
            assert_eq!(
                rejection.seq_nr, 3,
                "the event that could not be serialized"
            );
            assert!(
                rejection.reason.contains("refuses to be serialized"),
                "{rejection}"
            );
        }
        other => panic!("expected a rejection, got {other:?}"),
    }
    match e.note().await {
        Note::Rejected(rejection) => assert_eq!(rejection.seq_nr, 3),
        other => panic!("expected on_persist_rejected, got {other:?}"),
    }
    assert_eq!(e.get().await, (4, vec![(1, Item::Ok(1))]));
    assert_eq!(e.stored(vec![Item::Ok(5)]).await, 5);
    let stored = adversarial::stored_seq_nrs(&p, pid, 0, u64::MAX).await;
    assert_eq!(stored, vec![1, 5]);
    drop(e);
    let mut e = start::<Items>(&p, pid);
    assert_eq!(e.recovered().await, 5);
    assert_eq!(e.get().await, (5, vec![(1, Item::Ok(1)), (5, Item::Ok(5))]));
    within("shutdown", p.shutdown()).await;
}

// ---------------------------------------------------------------------------------------------
// Values serde_json writes but does not read back as they were

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum Reading {
    Value(f64),
    Maybe(Option<f64>),
    Nested(Box<Nest>),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum Nest {
    Leaf,
    In(Vec<Nest>),
}

fn nest(depth: usize) -> Nest {
    (0..depth).fold(Nest::Leaf, |inner, _| Nest::In(vec![inner]))
}

struct Readings;
impl Schema for Readings {
    type Ev = Reading;
}

/// A float whose shortest representation serde_json writes is read back as a neighbouring
/// float unless its `float_roundtrip` feature is on: the state an actor applied live and the
/// state it recovers after a restart differ. serde-rs/json #707, #937, #1336 ("the library
/// writes a string it cannot itself read back").
async fn floats_recover_exactly_as_they_were_applied(kind: Kind) {
    let b = Backend::new(kind).await;
    let pid = "Readings|floats";
    let p = b.open().await;
    let values = [
        0.1 * 1.1,
        1.0 / 9.0 * 1.1,
        122.416_294_033_786_58,
        1.577_777_777_777_000_1,
        -9.643_915_712_060_552e-234,
        f64::MAX,
        f64::MIN_POSITIVE,
        5e-324,
        -0.0,
    ];
    let events: Vec<Reading> = values.iter().map(|v| Reading::Value(*v)).collect();
    let mut e = start::<Readings>(&p, pid);
    assert_eq!(e.recovered().await, 0);
    assert_eq!(e.stored(events.clone()).await, values.len() as u64);
    let live = e.get().await;
    drop(e);
    p.shutdown().await;

    let p = b.open().await;
    let mut e = start::<Readings>(&p, pid);
    assert_eq!(e.recovered().await, values.len() as u64);
    let recovered = e.get().await;
    let bits = |s: &(u64, Vec<(u64, Reading)>)| -> Vec<u64> {
        s.1.iter()
            .map(|(_, r)| match r {
                Reading::Value(v) => v.to_bits(),
                other => panic!("{other:?}"),
            })
            .collect()
    };
    assert_eq!(bits(&recovered), bits(&live), "{recovered:?} != {live:?}");
    assert_eq!(
        bits(&live),
        values.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
    );
    within("shutdown", p.shutdown()).await;
}

/// serde_json writes NaN and the infinities as `null`, which does not read back as an `f64`
/// (and reads back as `None` in an `Option<f64>`): such an event must be rejected when it is
/// persisted (nothing stored, the actor goes on), never stored to fail every later recovery
/// of the actor (or to come back as another value). serde-rs/json's NaN-as-null; NEventStore
/// #203 and Elders/Cronus #58 (an event that is stored but cannot be rehydrated).
async fn a_non_finite_float_is_rejected_not_stored_to_fail_every_recovery(kind: Kind) {
    let b = Backend::new(kind).await;
    let pid = "Readings|nan";
    let p = b.open().await;
    let mut e = start::<Readings>(&p, pid);
    assert_eq!(e.recovered().await, 0);
    assert_eq!(e.stored(vec![Reading::Value(1.5)]).await, 1);
    let mut next = 2;
    for bad in [
        Reading::Value(f64::NAN),
        Reading::Value(f64::INFINITY),
        Reading::Maybe(Some(f64::NEG_INFINITY)),
    ] {
        match e.persist_all(vec![bad.clone()]).await {
            Err(PersistError::Rejected(rejection)) => {
                assert_eq!(rejection.seq_nr, next, "{bad:?}");
                match e.note().await {
                    Note::Rejected(r) => assert_eq!(r.seq_nr, next),
                    other => panic!("expected on_persist_rejected, got {other:?}"),
                }
            }
            other => panic!("{bad:?} must be rejected, got {other:?}"),
        }
        next += 1;
    }
    assert_eq!(
        e.stored(vec![Reading::Maybe(None)]).await,
        next,
        "a None (also written as null) is stored"
    );
    drop(e);
    p.shutdown().await;

    let p = b.open().await;
    let mut e = start::<Readings>(&p, pid);
    assert_eq!(e.recovered().await, next);
    assert_eq!(
        e.get().await.1,
        vec![(1, Reading::Value(1.5)), (next, Reading::Maybe(None))]
    );
    within("shutdown", p.shutdown()).await;
}

/// serde_json reads at most 127 nested arrays or objects but writes any depth: an event nested
/// deeper is rejected when persisted (one at the limit is stored and recovers), never stored
/// to fail every later recovery.
async fn an_event_nested_deeper_than_the_reader_reads_is_rejected(kind: Kind) {
    let b = Backend::new(kind).await;
    let pid = "Readings|deep";
    let p = b.open().await;
    let mut e = start::<Readings>(&p, pid);
    assert_eq!(e.recovered().await, 0);
    // {"Nested": ...} is one level, each In([..]) two ({"In": [..]}).
    let deepest = Reading::Nested(Box::new(nest(63)));
    assert_eq!(e.stored(vec![deepest.clone()]).await, 1);
    match e
        .persist_all(vec![Reading::Nested(Box::new(nest(64)))])
        .await
    {
        Err(PersistError::Rejected(rejection)) => assert_eq!(rejection.seq_nr, 2),
        other => panic!("an event too deep to read back must be rejected, got {other:?}"),
    }
    assert!(matches!(e.note().await, Note::Rejected(_)));
    drop(e);
    p.shutdown().await;

    let p = b.open().await;
    let mut e = start::<Readings>(&p, pid);
    assert_eq!(e.recovered().await, 1, "the rejected number was not stored");
    assert_eq!(e.get().await.1, vec![(1, deepest)]);
    within("shutdown", p.shutdown()).await;
}

/// The same for a snapshot: a state holding a NaN, or nested deeper than serde_json reads, is
/// not saved (on_snapshot_failure with a serialization error, as conformance S12 says of a
/// snapshot that cannot be serialized), never saved to fail every later recovery (recovery
/// never skips a snapshot it cannot read). akka/akka-core #30077 (a snapshot that cannot be
/// read back keeps the actor from ever recovering).
async fn a_snapshot_serde_json_cannot_read_back_is_not_saved(kind: Kind) {
    let b = Backend::new(kind).await;
    let p = b.open().await;
    for (pid, bad) in [
        ("Readings|snap-nan", Reading::Value(f64::NAN)),
        ("Readings|snap-deep", Reading::Nested(Box::new(nest(70)))),
    ] {
        // Stored through a custom serializer that writes what the reader accepts.
        struct Lenient;
        impl Schema for Lenient {
            type Ev = Reading;
            fn serialize(event: &Reading) -> Result<SerializedEvent, SerializationError> {
                let payload = match event {
                    Reading::Value(v) if v.is_nan() => b"{\"Maybe\":null}".to_vec(),
                    Reading::Nested(_) => b"{\"Nested\":\"Leaf\"}".to_vec(),
                    other => to_json(other)?,
                };
                Ok(SerializedEvent {
                    payload,
                    serializer_id: JSON_SERIALIZER_ID,
                    manifest: String::new(),
                })
            }
        }
        let mut e = start::<Lenient>(&p, pid);
        assert_eq!(e.recovered().await, 0);
        assert_eq!(e.stored(vec![Reading::Value(2.0)]).await, 1);
        e.addr.do_send(Snap);
        assert!(matches!(e.note().await, Note::SnapshotSaved(1)));
        assert_eq!(e.stored(vec![bad]).await, 2);
        e.addr.do_send(Snap);
        match e.note().await {
            Note::SnapshotFailed(SnapshotError::Serialization { seq_nr: 2, .. }) => {}
            other => panic!("{pid}: the snapshot must not be saved, got {other:?}"),
        }
        drop(e);

        let mut e = start::<Readings>(&p, pid);
        assert_eq!(e.recovered().await, 2, "{pid}");
    }
    within("shutdown", p.shutdown()).await;
}

// ---------------------------------------------------------------------------------------------
// A decoder that panics on the read side

/// Decodes version 1, panicking on `Frozen` (a decoder with an `unwrap` or an `unreachable!`
/// for an event type it was not written for).
fn panicking_decoder(
    seq_nr: u64,
    event: &SerializedEvent,
) -> Result<AccountV1, SerializationError> {
    if event.manifest == "Frozen.v1" {
        panic!("no decoder for {}", event.manifest);
    }
    from_json(seq_nr, event.serializer_id, &event.payload)
}

/// Records every envelope it handles.
#[derive(Clone, Default)]
struct Recorder(std::sync::Arc<std::sync::Mutex<Vec<(String, u64)>>>);

#[async_trait::async_trait]
impl actix_persistence::projection::Handler<actix_persistence::EventEnvelope<AccountV1>>
    for Recorder
{
    async fn process(
        &self,
        envelope: &actix_persistence::EventEnvelope<AccountV1>,
    ) -> Result<(), actix_persistence::projection::HandlerError> {
        self.0
            .lock()
            .unwrap()
            .push((envelope.persistence_id.to_string(), envelope.seq_nr));
        Ok(())
    }
}

/// A decoder that panics on an event, in a typed query and in a projection's source: the
/// query yields the decoding error naming the event (as recovery turns a panicking
/// `deserialize_event` into `RecoveryError::Panicked`), never unwinds into its consumer, and the
/// projection fails its run with that error, restarts and ends `Failed` after `max_restarts`
/// with the error in its progress, instead of its task dying while its progress still reads
/// `Running`. akka/akka-persistence-cassandra #734 (an exception deserializing an event in
/// `EventsByPersistenceIdStage`); akka/akka-persistence-jdbc #95 (deserialization errors that
/// stop a query silently).
async fn a_panicking_decoder_fails_the_query_and_the_projection_visibly(kind: Kind) {
    use actix_persistence::projection::{
        InMemoryOffsetStore, Projection, ProjectionId, ProjectionState, QuerySource, RestartBackoff,
    };
    let b = Backend::new(kind).await;
    let pid = "Account|decoder-panics";
    let p = b.open().await;
    write_with::<V1>(
        &p,
        pid,
        vec![
            AccountV1::Deposited { amount: 1 },
            AccountV1::Frozen,
            AccountV1::Deposited { amount: 2 },
        ],
    )
    .await;
    let q = p.query().expect("query");
    let items: Vec<Result<u64, String>> = within(
        "typed query",
        q.current_events_by_persistence_id(pid, 0, u64::MAX)
            .decode_with(panicking_decoder)
            .map(|item| match item {
                Ok(e) => Ok(e.seq_nr),
                Err(QueryError::Decode { seq_nr, source, .. }) => {
                    Err(format!("{seq_nr}: {source}"))
                }
                Err(other) => Err(other.to_string()),
            })
            .collect::<Vec<_>>(),
    )
    .await;
    assert_eq!(items.len(), 2, "{items:?}");
    assert_eq!(items[0], Ok(1));
    match &items[1] {
        Err(message) => assert!(
            message.starts_with("2: ") && message.contains("no decoder for Frozen.v1"),
            "{message}"
        ),
        other => panic!("expected the decoding error of event 2, got {other:?}"),
    }

    let recorder = Recorder::default();
    let source = QuerySource::<AccountV1>::events_by_slices(q.clone(), "Account", 0, 1023)
        .current()
        .decoded_with(panicking_decoder);
    let handle = Projection::at_least_once(
        ProjectionId::for_slices("decoder-panics", 0, 1023),
        source,
        InMemoryOffsetStore::new(),
        recorder.clone(),
    )
    .with_restart_backoff(RestartBackoff {
        min: std::time::Duration::from_millis(5),
        max: std::time::Duration::from_millis(20),
        random_factor: 0.0,
        max_restarts: Some(1),
    })
    .start();
    let progress = within(
        "the projection to end",
        handle.wait_for(|p| p.state.is_terminal()),
    )
    .await
    .expect("the projection ends with a state of its own, its task did not die");
    assert_eq!(progress.state, ProjectionState::Failed);
    assert_eq!(progress.restarts, 1);
    let error = progress.last_error.expect("the failure is reported");
    assert!(
        error.contains(pid) && error.contains("no decoder for Frozen.v1"),
        "{error}"
    );
    assert_eq!(*recorder.0.lock().unwrap(), vec![(pid.to_owned(), 1)]);
    assert_eq!(handle.join().await, ProjectionState::Failed);
    within("shutdown", p.shutdown()).await;
}

on_every_store!(
    an_event_of_a_removed_variant_fails_recovery_naming_its_seq_nr,
    a_field_added_with_a_default_recovers_and_without_one_fails_at_the_first_old_event,
    a_manifest_selects_the_upcaster_in_recovery_and_in_typed_queries,
    an_unknown_serializer_id_or_truncated_payload_fails_recovery_and_ends_typed_queries,
    a_snapshot_of_a_changed_state_type_fails_recovery_and_skipping_it_replays_the_events,
    a_persist_all_with_one_unserializable_event_stores_none_of_it,
    floats_recover_exactly_as_they_were_applied,
    a_non_finite_float_is_rejected_not_stored_to_fail_every_recovery,
    an_event_nested_deeper_than_the_reader_reads_is_rejected,
    a_snapshot_serde_json_cannot_read_back_is_not_saved,
    a_panicking_decoder_fails_the_query_and_the_projection_visibly,
    a_snapshot_the_actor_cannot_restore_never_leaves_it_partially_recovered,
);
