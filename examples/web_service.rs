//! An HTTP service (actix-web) over persistent actors and a read model: commands go to the
//! accounts' persistent actors, queries read the `web_account_balance` table an exactly-once
//! projection (`web-account-balance`) keeps in the journal's SQLite database. Its accounts
//! (`Account|<id>`) are not quickstart's (`account-<n>`), and its projection and table have
//! names of their own, so both examples can run on the same file.
//!
//! ```text
//! POST /accounts/{id}/deposit   {"amount": 100}  -> 200 {"balance": 100}, or 422 when the
//!                                                   balance would exceed i64::MAX
//! POST /accounts/{id}/withdraw  {"amount": 30}   -> 200 {"balance": 70}, or 409
//!                                                   {"error": "insufficient funds", "balance": 70}
//! GET  /accounts/{id}                            -> 200 {"id": "...", "balance": 70} (read model), or 404
//! GET  /projection                               -> 200 {"state": "Running", "handled": 2, "lag_events": 0, "lag_ms": 0}
//! GET  /ready                                    -> 200 "ready", or 503 with the reason
//! ```
//!
//! A command to an account whose recovery or write failed answers 503 with the cause
//! (`PersistentAddr`). When the server stops (Ctrl-C), the projection stops and
//! `Persistence::shutdown` waits for the journal's work under way before the process exits.
//!
//! `WEB_SERVICE_ADDR` sets the address (default `127.0.0.1:8080`; port 0 picks a free one); the
//! first line printed names it. The journal is the usual SQLite file (`actix-persistence.db`,
//! see `reference.toml`). Reads follow writes after the projection's poll interval (50 ms here).
//! The library's warnings and errors go to stderr (`RUST_LOG` overrides, e.g.
//! `RUST_LOG=actix_persistence=debug`).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use actix_persistence::actix::{Context, Handler, Message};
use actix_persistence::projection::query::{EventEnvelope, Offset, QuerySettings, ReadJournal};
// The sqlx and #[async_trait] of the projection crate: no dependencies of this crate's own.
use actix_persistence::projection::sqlx::{self, Sqlite, SqlitePool, Transaction};
use actix_persistence::projection::{
    async_trait, HandlerError, Projection, ProjectionHandle, ProjectionId, QuerySource,
    SqliteOffsetStore, TransactionalHandler,
};
use actix_persistence::{
    EventSourced, PersistReply, PersistResult, Persistence, PersistenceState, PersistentActor,
    PersistentAddr,
};
use actix_web::{get, post, web, App, HttpResponse, HttpServer, Responder};
use serde::{Deserialize, Serialize};
use tracing_subscriber::EnvFilter;

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
        match event {
            AccountEvent::Deposited { amount } => self.balance += amount,
            AccountEvent::Withdrawn { amount } => self.balance -= amount,
        }
    }
}

/// A command; the reply is the new balance, or why it was refused.
#[derive(Message)]
#[rtype(result = "PersistResult<Result<u64, Refused>>")]
enum Command {
    Deposit(u64),
    Withdraw(u64),
}

/// A refused command: nothing was persisted; the balance is the account's current one.
enum Refused {
    /// A withdrawal above the balance.
    InsufficientFunds { balance: u64 },
    /// A deposit that would take the balance above `MAX_BALANCE`.
    BalanceLimit { balance: u64 },
}

impl Handler<Command> for Account {
    type Result = PersistReply<Result<u64, Refused>>;

    fn handle(&mut self, command: Command, ctx: &mut Context<Self>) -> Self::Result {
        // Validated before persisting: a stored event is replayed on every recovery, so
        // `apply` must always be able to apply it.
        let event = match command {
            Command::Deposit(amount) => match self.balance.checked_add(amount) {
                Some(balance) if balance <= MAX_BALANCE => AccountEvent::Deposited { amount },
                _ => {
                    return PersistReply::ready(Err(Refused::BalanceLimit {
                        balance: self.balance,
                    }))
                }
            },
            Command::Withdraw(amount) if amount > self.balance => {
                return PersistReply::ready(Err(Refused::InsufficientFunds {
                    balance: self.balance,
                }))
            }
            Command::Withdraw(amount) => AccountEvent::Withdrawn { amount },
        };
        self.persist(ctx, event, |account, _, _| Ok(account.balance))
    }
}

/// The read model: `web_account_balance`, written in the projection's transaction.
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
            "INSERT INTO web_account_balance (persistence_id, balance) VALUES (?, ?) \
             ON CONFLICT (persistence_id) DO UPDATE SET balance = balance + excluded.balance",
        )
        .bind(&*envelope.persistence_id)
        .bind(change)
        .execute(&mut **tx)
        .await?;
        Ok(())
    }
}

/// What the handlers share.
struct AppState {
    persistence: Persistence,
    accounts: Mutex<HashMap<String, PersistentAddr<Account>>>,
    read_model: SqlitePool,
    /// Taken out and stopped at shutdown, whoever still holds the state (actix-web's workers
    /// drop their clones of it in their own time).
    projection: tokio::sync::Mutex<Option<ProjectionHandle<Offset>>>,
}

impl AppState {
    /// The running actor of account `id`, started (and recovered) on first use.
    fn account(
        &self,
        id: &str,
    ) -> Result<PersistentAddr<Account>, actix_persistence::InvalidPersistenceId> {
        let mut accounts = self.accounts.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(addr) = accounts.get(id).filter(|a| a.addr().connected()) {
            return Ok(addr.clone());
        }
        let addr = Account {
            persistence: self.persistence.state(format!("Account|{id}"))?,
            balance: 0,
        }
        .start_persistent();
        accounts.insert(id.to_owned(), addr.clone());
        Ok(addr)
    }
}

#[derive(Deserialize)]
struct Amount {
    amount: u64,
}

#[derive(Serialize)]
struct Balance {
    balance: u64,
}

async fn command(state: &AppState, id: &str, command: Command) -> HttpResponse {
    let account = match state.account(id) {
        Ok(account) => account,
        Err(e) => return HttpResponse::BadRequest().body(e.to_string()),
    };
    match account.ask(command).await {
        Ok(Ok(balance)) => HttpResponse::Ok().json(Balance { balance }),
        Ok(Err(Refused::InsufficientFunds { balance })) => HttpResponse::Conflict()
            .json(serde_json::json!({ "error": "insufficient funds", "balance": balance })),
        Ok(Err(Refused::BalanceLimit { balance })) => {
            HttpResponse::UnprocessableEntity().json(serde_json::json!({
                "error": format!("the balance would exceed {MAX_BALANCE}"),
                "balance": balance,
            }))
        }
        // Its write failed, or the actor is gone: the error says why (its recovery or write
        // failure), not just "mailbox closed".
        Err(e) => HttpResponse::ServiceUnavailable().body(e.to_string()),
    }
}

#[post("/accounts/{id}/deposit")]
async fn deposit_route(
    state: web::Data<AppState>,
    id: web::Path<String>,
    body: web::Json<Amount>,
) -> impl Responder {
    command(&state, &id, Command::Deposit(body.amount)).await
}

#[post("/accounts/{id}/withdraw")]
async fn withdraw_route(
    state: web::Data<AppState>,
    id: web::Path<String>,
    body: web::Json<Amount>,
) -> impl Responder {
    command(&state, &id, Command::Withdraw(body.amount)).await
}

#[get("/accounts/{id}")]
async fn balance_route(state: web::Data<AppState>, id: web::Path<String>) -> impl Responder {
    let balance: Result<Option<i64>, sqlx::Error> =
        sqlx::query_scalar("SELECT balance FROM web_account_balance WHERE persistence_id = ?")
            .bind(format!("Account|{id}"))
            .fetch_optional(&state.read_model)
            .await;
    match balance {
        Ok(Some(balance)) => {
            HttpResponse::Ok().json(serde_json::json!({ "id": *id, "balance": balance }))
        }
        Ok(None) => HttpResponse::NotFound().finish(),
        Err(e) => HttpResponse::ServiceUnavailable().body(e.to_string()),
    }
}

#[get("/projection")]
async fn projection_route(state: web::Data<AppState>) -> impl Responder {
    let projection = state.projection.lock().await;
    let Some(projection) = projection.as_ref() else {
        return HttpResponse::ServiceUnavailable().body("shutting down");
    };
    let progress = projection.progress();
    let lag = projection.lag().await.ok();
    HttpResponse::Ok().json(serde_json::json!({
        "state": format!("{:?}", progress.state),
        "handled": progress.handled,
        "lag_events": lag.map(|l| l.events),
        "lag_ms": lag.map(|l| l.ms),
    }))
}

/// Readiness: the journal's circuit breaker is closed and its store answers a read.
#[get("/ready")]
async fn ready_route(state: web::Data<AppState>) -> impl Responder {
    match state.persistence.health().await {
        Ok(()) => HttpResponse::Ok().body("ready"),
        Err(unhealthy) => HttpResponse::ServiceUnavailable().body(unhealthy.to_string()),
    }
}

/// Starts the read model's projection on the journal's own SQLite database: its table and
/// offsets are written on the journal's writer connection (the file's one writer).
async fn start_read_model(
    persistence: &Persistence,
) -> Result<(SqlitePool, ProjectionHandle<Offset>), Box<dyn std::error::Error>> {
    let Some(journal) = persistence.sqlite_journal() else {
        return Err(
            "this example keeps its read model in SQLite: set journal.plugin = \"sqlite\"".into(),
        );
    };
    let pool = journal.writer_pool().clone();
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS web_account_balance \
         (persistence_id TEXT PRIMARY KEY, balance INTEGER NOT NULL)",
    )
    .execute(&pool)
    .await?;
    let query = ReadJournal::new(
        journal.clone(),
        QuerySettings {
            refresh_interval: Duration::from_millis(50),
            ..QuerySettings::default()
        },
    );
    // The projection's name keys its stored offset and fences any other instance started
    // under it: a name (and table) of its own, so running `quickstart` on the same file at the
    // same time leaves both read models alone.
    let handle = Projection::exactly_once(
        ProjectionId::for_slices("web-account-balance", 0, 1023),
        QuerySource::<AccountEvent>::events_by_slices(query, "Account", 0, 1023),
        SqliteOffsetStore::new(pool.clone()),
        AccountBalances,
    )
    .start();
    Ok((pool, handle))
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let persistence = Persistence::start().await?;
    let (read_model, projection) = start_read_model(&persistence).await?;
    let state = web::Data::new(AppState {
        persistence: persistence.clone(),
        accounts: Mutex::new(HashMap::new()),
        read_model,
        projection: tokio::sync::Mutex::new(Some(projection)),
    });
    let addr = std::env::var("WEB_SERVICE_ADDR").unwrap_or_else(|_| "127.0.0.1:8080".to_owned());
    let app_state = state.clone();
    let server = HttpServer::new(move || {
        App::new()
            .app_data(app_state.clone())
            .service(deposit_route)
            .service(withdraw_route)
            .service(balance_route)
            .service(projection_route)
            .service(ready_route)
    })
    .workers(1)
    .bind(&addr)?;
    for bound in server.addrs() {
        println!("web_service: listening on http://{bound}");
    }
    // Until Ctrl-C (or SIGTERM): actix-web then finishes the requests under way.
    server.run().await?;
    // The projection first: its queries and transactions are on the journal's connections.
    if let Some(projection) = state.projection.lock().await.take() {
        projection.stop().await;
    }
    // Waits for the writes, snapshot saves and deletes under way, then closes the SQLite file.
    persistence.shutdown().await;
    Ok(())
}

#[actix_web::main]
async fn main() -> std::process::ExitCode {
    // The library logs through `tracing`; without a subscriber nothing it logs is printed.
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    match run().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("web_service: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
