//! Bank accounts as persistent actors on the embedded SQLite journal, and a read model
//! (`quickstart_account_balance` table) kept by an exactly-once projection in the same
//! database.
//!
//! Run it twice in the same folder: the second run recovers every account where the first
//! ended, and the projection resumes from its stored offset.
//! `ACTIX_PERSISTENCE__JOURNAL__WRITE_REPLY_ORDERING_GROUPS=0` (or `four`) makes it exit
//! non-zero with the configuration error. The library logs through `tracing`: this example
//! prints its warnings and errors; `RUST_LOG=actix_persistence=debug` adds a line per
//! recovery, and one per persist and per journal write when it ends (their spans closing,
//! with the time they took).

use std::process::ExitCode;
use std::time::Duration;

use actix_persistence::actix::{Context, Handler, Message, MessageResponse};
use actix_persistence::futures::future::join_all;
use actix_persistence::projection::query::{EventEnvelope, Offset, QuerySettings, ReadJournal};
// The sqlx and #[async_trait] of the projection crate: no dependencies of this crate's own.
use actix_persistence::projection::sqlx::{self, Sqlite, Transaction};
use actix_persistence::projection::{
    async_trait, HandlerError, Projection, ProjectionHandle, ProjectionId, QuerySource,
    SqliteOffsetStore, TransactionalHandler,
};
use actix_persistence::SqliteJournal;
use actix_persistence::{
    CommandError, EventSourced, PersistReply, PersistResult, Persistence, PersistenceState,
    PersistentActor, PersistentAddr,
};
use serde::{Deserialize, Serialize};
use tracing_subscriber::fmt::format::FmtSpan;
use tracing_subscriber::EnvFilter;

const ACCOUNTS: usize = 5;
const COMMANDS: usize = 300;

/// What happened to an account.
#[derive(Debug, Serialize, Deserialize)]
enum AccountEvent {
    Deposited { amount: u64 },
    Withdrawn { amount: u64 },
}

/// A bank account: its balance is the fold of its events.
#[derive(PersistentActor)]
struct Account {
    persistence: PersistenceState<Self>,
    balance: u64,
    recovered_events: u64,
}

/// The largest balance an account may hold: what the read model's `INTEGER` column (an
/// `i64`) stores.
const MAX_BALANCE: u64 = i64::MAX as u64;

impl EventSourced for Account {
    type Event = AccountEvent;

    /// Cannot overflow: the command handler persists only events that keep the balance
    /// within `0..=MAX_BALANCE` (an event `apply` cannot apply would stop the actor, and
    /// every later recovery of it).
    fn apply(&mut self, event: &AccountEvent) {
        if !self.persistence.is_recovered() {
            self.recovered_events += 1;
        }
        match event {
            AccountEvent::Deposited { amount } => self.balance += amount,
            AccountEvent::Withdrawn { amount } => self.balance -= amount,
        }
    }
}

/// Why a command was refused; nothing was persisted.
#[derive(Debug, thiserror::Error)]
enum Refused {
    #[error("insufficient funds: balance {balance}, asked {asked}")]
    InsufficientFunds { balance: u64, asked: u64 },
    #[error("the balance {balance} plus {asked} would exceed {MAX_BALANCE}")]
    BalanceLimit { balance: u64, asked: u64 },
}

#[derive(Message)]
#[rtype(result = "PersistResult<Result<u64, Refused>>")]
enum Command {
    Deposit(u64),
    Withdraw(u64),
}

impl Handler<Command> for Account {
    type Result = PersistReply<Result<u64, Refused>>;

    fn handle(&mut self, command: Command, ctx: &mut Context<Self>) -> Self::Result {
        // Validated before persisting: a stored event is replayed on every recovery, so
        // `apply` must always be able to apply it. A refusal replies at once, storing nothing.
        let event = match command {
            Command::Deposit(amount) => match self.balance.checked_add(amount) {
                Some(balance) if balance <= MAX_BALANCE => AccountEvent::Deposited { amount },
                _ => {
                    return PersistReply::ready(Err(Refused::BalanceLimit {
                        balance: self.balance,
                        asked: amount,
                    }))
                }
            },
            Command::Withdraw(amount) if amount > self.balance => {
                return PersistReply::ready(Err(Refused::InsufficientFunds {
                    balance: self.balance,
                    asked: amount,
                }))
            }
            Command::Withdraw(amount) => AccountEvent::Withdrawn { amount },
        };
        // The reply is sent once the event is stored and applied.
        self.persist(ctx, event, |account, _, _| Ok(account.balance))
    }
}

#[derive(Message)]
#[rtype(result = "Summary")]
struct GetSummary;

#[derive(Debug, Clone, MessageResponse)]
struct Summary {
    persistence_id: String,
    balance: u64,
    last_seq_nr: u64,
    recovered_events: u64,
}

impl Handler<GetSummary> for Account {
    type Result = Summary;

    fn handle(&mut self, _: GetSummary, _: &mut Context<Self>) -> Summary {
        Summary {
            persistence_id: self.persistence_id().to_owned(),
            balance: self.balance,
            last_seq_nr: self.last_seq_nr(),
            recovered_events: self.recovered_events,
        }
    }
}

/// A `PersistentAddr` answers a command to an account whose recovery or write failed with
/// that failure (`CommandError::ActorStopped`), not just "mailbox closed".
async fn summaries(accounts: &[PersistentAddr<Account>]) -> Result<Vec<Summary>, CommandError> {
    join_all(accounts.iter().map(|a| a.send(GetSummary)))
        .await
        .into_iter()
        .collect()
}

fn print(label: &str, summaries: &[Summary]) {
    for s in summaries {
        println!(
            "{label}: {} balance {} (last seq_nr {})",
            s.persistence_id, s.balance, s.last_seq_nr
        );
    }
}

/// A deterministic command mix: mostly deposits, some withdrawals that may be refused.
fn command(i: usize) -> (usize, Command) {
    let account = (i * 7 + 3) % ACCOUNTS;
    let amount = (i as u64 * 37 + 11) % 100 + 1;
    if i % 3 == 2 {
        (account, Command::Withdraw(amount))
    } else {
        (account, Command::Deposit(amount))
    }
}

/// The read model: one row per account, updated by the projection in the same transaction
/// that saves its offset, so balances and offset never disagree.
struct AccountBalances;

#[async_trait]
impl TransactionalHandler<EventEnvelope<AccountEvent>, Transaction<'static, Sqlite>>
    for AccountBalances
{
    async fn process(
        &self,
        tx: &mut Transaction<'static, Sqlite>,
        envelope: &EventEnvelope<AccountEvent>,
    ) -> Result<(), HandlerError> {
        // Never out of range for events the actor persisted (at most `MAX_BALANCE`); an
        // error, not a wrapped `as` cast, if one were.
        let change = match envelope.event {
            AccountEvent::Deposited { amount } => i64::try_from(amount)?,
            AccountEvent::Withdrawn { amount } => -i64::try_from(amount)?,
        };
        sqlx::query(
            "INSERT INTO quickstart_account_balance (persistence_id, balance) VALUES (?, ?) \
             ON CONFLICT (persistence_id) DO UPDATE SET balance = balance + excluded.balance",
        )
        .bind(&*envelope.persistence_id)
        .bind(change)
        .execute(&mut **tx)
        .await?;
        Ok(())
    }
}

/// The read model's projection over every account's events (ids without `|` have the entity
/// type ""), on the journal's SQLite database.
async fn start_read_model(
    persistence: &Persistence,
) -> Result<Option<(SqliteJournal, ProjectionHandle<Offset>)>, Box<dyn std::error::Error>> {
    // The journal `Persistence` opened: the read model's table and the projection's offsets
    // are written on its writer connection, the file's one writer.
    let Some(journal) = persistence.sqlite_journal().cloned() else {
        let plugin = persistence.settings().journal.plugin;
        println!(
            "quickstart: the read model's projection is shown on the SQLite journal; with \
             journal.plugin = \"{plugin}\" it is skipped (projections on PostgreSQL: \
             docs/projections.md)"
        );
        return Ok(None);
    };
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS quickstart_account_balance \
         (persistence_id TEXT PRIMARY KEY, balance INTEGER NOT NULL)",
    )
    .execute(journal.writer_pool())
    .await?;
    let query = ReadJournal::new(
        journal.clone(),
        QuerySettings {
            refresh_interval: Duration::from_millis(50),
            ..Default::default()
        },
    );
    // The projection's name keys its stored offset and fences any other instance started
    // under it: a name (and table) of its own, so running `web_service` on the same file
    // at the same time leaves both read models alone.
    let projection = Projection::exactly_once(
        ProjectionId::for_slices("quickstart-account-balance", 0, 1023),
        QuerySource::<AccountEvent>::events_by_slices(query, "", 0, 1023),
        SqliteOffsetStore::new(journal.writer_pool().clone()),
        AccountBalances,
    );
    Ok(Some((journal, projection.start())))
}

/// Waits until the projection has handled every stored event, then compares the read model
/// with the actors' balances; the number of accounts that agree.
async fn read_model_agrees(
    journal: &SqliteJournal,
    projection: ProjectionHandle<Offset>,
    end: &[Summary],
) -> Result<usize, Box<dyn std::error::Error>> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while projection.lag().await?.events > 0 {
        if tokio::time::Instant::now() > deadline {
            return Err("the read model did not catch up within 30 s".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    projection.stop().await;
    let mut agree = 0;
    for s in end {
        let balance: Option<i64> = sqlx::query_scalar(
            "SELECT balance FROM quickstart_account_balance WHERE persistence_id = ?",
        )
        .bind(&s.persistence_id)
        .fetch_optional(journal.writer_pool())
        .await?;
        let balance = balance.unwrap_or(0);
        println!("read model: {} balance {balance}", s.persistence_id);
        if i64::try_from(s.balance).ok() != Some(balance) {
            return Err(format!(
                "read model disagrees for {}: {balance}, the actor has {}",
                s.persistence_id, s.balance
            )
            .into());
        }
        agree += 1;
    }
    Ok(agree)
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let persistence = Persistence::start().await?;
    let read_model = start_read_model(&persistence).await?;

    let mut accounts = Vec::with_capacity(ACCOUNTS);
    for n in 1..=ACCOUNTS {
        let account = Account {
            persistence: persistence.state(format!("account-{n}"))?,
            balance: 0,
            recovered_events: 0,
        };
        accounts.push(account.start_persistent());
    }
    // Each actor handles its first command only after recovery completed.
    let recovered = summaries(&accounts).await?;
    print("recovered", &recovered);

    let replies = join_all((0..COMMANDS).map(|i| {
        let (account, command) = command(i);
        accounts[account].ask(command)
    }))
    .await;
    let (mut persisted, mut refused) = (0, 0);
    for reply in replies {
        // A refused withdrawal persists nothing.
        if reply?.is_ok() {
            persisted += 1;
        } else {
            refused += 1;
        }
    }
    // A deposit the balance cannot hold is refused too, before anything is stored: had it
    // been persisted, `apply` would overflow on it now and on every later recovery.
    if let Err(refused) = accounts[0].ask(Command::Deposit(u64::MAX)).await? {
        println!("quickstart: deposit of {} refused: {refused}", u64::MAX);
    }

    let end = summaries(&accounts).await?;
    print("end", &end);
    println!(
        "quickstart: {COMMANDS} commands, {refused} withdrawals refused for insufficient funds \
         (they persist no event)"
    );
    if let Some((journal, projection)) = read_model {
        let agree = read_model_agrees(&journal, projection, &end).await?;
        println!("quickstart: read model agrees for {agree} accounts");
    }
    // Waits for background snapshot saves and deletes, then closes the SQLite file cleanly.
    persistence.shutdown().await;
    let recovered_events: u64 = recovered.iter().map(|s| s.recovered_events).sum();
    println!(
        "quickstart: recovered {recovered_events} events, persisted {persisted} events, {} accounts",
        accounts.len()
    );
    Ok(())
}

#[actix_persistence::main]
async fn main() -> ExitCode {
    // The library logs through `tracing`; without a subscriber nothing it logs is printed.
    // Every persist and journal write is a debug span with no event of its own: `FmtSpan::CLOSE`
    // prints a line when one ends (with its time busy and idle).
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn")),
        )
        .with_span_events(FmtSpan::CLOSE)
        .with_writer(std::io::stderr)
        .init();
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("quickstart: {e}");
            ExitCode::FAILURE
        }
    }
}
