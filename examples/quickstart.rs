//! Bank accounts as persistent actors on the embedded SQLite journal.
//!
//! Run it twice in the same folder: the second run recovers every account where the first
//! ended. `ACTIX_PERSISTENCE__JOURNAL__WRITE_REPLY_ORDERING_GROUPS=0` (or `four`) makes it
//! exit non-zero with the configuration error. The library logs through `tracing`: this
//! example prints its warnings and errors, `RUST_LOG=actix_persistence=debug` shows every
//! recovery and write.

use std::process::ExitCode;

use actix_persistence::actix::{Addr, Context, Handler, Message};
use actix_persistence::{
    EventSourced, PersistReply, PersistResult, Persistence, PersistenceState, PersistentActor,
};
use futures::future::join_all;
use serde::{Deserialize, Serialize};
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

impl EventSourced for Account {
    type Event = AccountEvent;

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

#[derive(Debug, thiserror::Error)]
#[error("insufficient funds: balance {balance}, asked {asked}")]
struct InsufficientFunds {
    balance: u64,
    asked: u64,
}

#[derive(Message)]
#[rtype(result = "PersistResult<Result<u64, InsufficientFunds>>")]
enum Command {
    Deposit(u64),
    Withdraw(u64),
}

impl Handler<Command> for Account {
    type Result = PersistReply<Result<u64, InsufficientFunds>>;

    fn handle(&mut self, command: Command, ctx: &mut Context<Self>) -> Self::Result {
        let event = match command {
            Command::Deposit(amount) => AccountEvent::Deposited { amount },
            Command::Withdraw(amount) if amount > self.balance => {
                return PersistReply::ready(Err(InsufficientFunds {
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

#[derive(Debug, Clone, actix::MessageResponse)]
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

async fn summaries(accounts: &[Addr<Account>]) -> Result<Vec<Summary>, actix::MailboxError> {
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

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let persistence = Persistence::start().await?;

    let mut accounts = Vec::with_capacity(ACCOUNTS);
    for n in 1..=ACCOUNTS {
        let account = Account {
            persistence: persistence.state(format!("account-{n}"))?,
            balance: 0,
            recovered_events: 0,
        };
        accounts.push(actix::Actor::start(account));
    }
    // Each actor handles its first command only after recovery completed.
    let recovered = summaries(&accounts).await?;
    print("recovered", &recovered);

    let replies = join_all((0..COMMANDS).map(|i| {
        let (account, command) = command(i);
        accounts[account].send(command)
    }))
    .await;
    let (mut persisted, mut refused) = (0, 0);
    for reply in replies {
        // A refused withdrawal persists nothing.
        if reply??.is_ok() {
            persisted += 1;
        } else {
            refused += 1;
        }
    }

    let end = summaries(&accounts).await?;
    print("end", &end);
    println!(
        "quickstart: {COMMANDS} commands, {refused} withdrawals refused for insufficient funds \
         (they persist no event)"
    );
    // Waits for background snapshot saves and deletes, then closes the SQLite file cleanly.
    persistence.shutdown().await;
    let recovered_events: u64 = recovered.iter().map(|s| s.recovered_events).sum();
    println!(
        "quickstart: recovered {recovered_events} events, persisted {persisted} events, {} accounts",
        accounts.len()
    );
    Ok(())
}

#[actix::main]
async fn main() -> ExitCode {
    // The library logs through `tracing`; without a subscriber nothing it logs is printed.
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn")),
        )
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
