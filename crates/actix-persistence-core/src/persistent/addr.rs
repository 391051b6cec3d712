//! The address of a persistent actor that tells a sender why the actor is gone.

use std::sync::{Arc, OnceLock};

use actix::dev::ToEnvelope;
use actix::{Actor, Addr, Handler, MailboxError, Message};

use super::{PersistError, PersistResult, PersistentActor, RecoveryError};
use crate::error::JournalError;

/// Why a persistent actor stopped on its own: its recovery failed, a write failed, or user code
/// panicked.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ActorFailure {
    /// Recovery failed; the actor never handled a command.
    #[error(transparent)]
    Recovery(RecoveryError),
    /// A write failed (its events may or may not be stored); the actor stopped after it.
    #[error("a write of the persistent actor failed: {0}")]
    Persist(JournalError),
    /// User code panicked after recovery (`apply` of a stored event, a continuation, a hook,
    /// or a command handler); the actor stopped (its stop reason is
    /// [`StopReason::Panicked`](super::StopReason::Panicked)).
    #[error("the persistent actor panicked: {reason}")]
    Panicked {
        /// The panic message.
        reason: String,
    },
}

/// Where a persistent actor leaves its [`ActorFailure`] for the holders of its
/// [`PersistentAddr`]. Shared by the actor's `PersistenceState` and every such address.
pub(crate) type FailureCell = Arc<OnceLock<ActorFailure>>;

/// Why a command sent through a [`PersistentAddr`] got no answer from its handler.
///
/// `Debug` writes the message (as `Display`), so a `main` that returns the error with `?`
/// prints what happened and what to do rather than nested structs; `{:#?}` writes the
/// structure.
#[derive(Clone, thiserror::Error)]
pub enum CommandError {
    /// The actor is gone (or stopped before it answered). `cause` is its recovery or write
    /// failure; `None` when it was stopped normally.
    #[error("persistent actor {persistence_id:?} is gone{}", match cause {
        Some(cause) => format!(": {cause}"),
        None => " (stopped normally)".to_owned(),
    })]
    ActorStopped {
        /// The actor's persistence id.
        persistence_id: String,
        /// Why it stopped, when it stopped on a failure.
        cause: Option<ActorFailure>,
    },
    /// The command's own write was rejected or failed (see [`PersistError`]).
    #[error(transparent)]
    Persist(PersistError),
    /// The message could not be delivered for another reason (a send timeout).
    #[error("command to persistent actor {persistence_id:?} not delivered: {source}")]
    Mailbox {
        /// The actor's persistence id.
        persistence_id: String,
        /// Actix's error.
        #[source]
        source: MailboxError,
    },
}

impl std::fmt::Debug for CommandError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if !f.alternate() {
            return write!(f, "{self}");
        }
        match self {
            CommandError::ActorStopped {
                persistence_id,
                cause,
            } => f
                .debug_struct("ActorStopped")
                .field("persistence_id", persistence_id)
                .field("cause", cause)
                .finish(),
            CommandError::Persist(error) => f.debug_tuple("Persist").field(error).finish(),
            CommandError::Mailbox {
                persistence_id,
                source,
            } => f
                .debug_struct("Mailbox")
                .field("persistence_id", persistence_id)
                .field("source", source)
                .finish(),
        }
    }
}

/// The address of a running persistent actor, made by [`PersistentActor::start_persistent`].
///
/// An Actix [`Addr`] answers a command sent to a stopped actor with `MailboxError::Closed`
/// only. This address answers [`CommandError::ActorStopped`] carrying the actor's
/// [`ActorFailure`] instead: the [`RecoveryError`] that stopped it before its first command, or
/// the [`JournalError`] of the write after which it stopped.
///
/// # Examples
/// ```no_run
/// # use actix_persistence_core::persistent::{CommandError, PersistentActor, PersistResult};
/// # async fn example<A, M>(account: A, command: M)
/// # where A: PersistentActor + actix::Handler<M>, M: actix::Message<Result = PersistResult<u64>> + Send + 'static,
/// #   A::Context: actix::dev::ToEnvelope<A, M> {
/// let account = account.start_persistent();
/// match account.ask(command).await {
///     Ok(balance) => println!("balance {balance}"),
///     Err(CommandError::ActorStopped { cause: Some(cause), .. }) => eprintln!("gone: {cause}"),
///     Err(other) => eprintln!("{other}"),
/// }
/// # }
/// ```
pub struct PersistentAddr<A: Actor> {
    addr: Addr<A>,
    persistence_id: Arc<str>,
    failure: FailureCell,
}

impl<A: Actor> Clone for PersistentAddr<A> {
    fn clone(&self) -> Self {
        PersistentAddr {
            addr: self.addr.clone(),
            persistence_id: Arc::clone(&self.persistence_id),
            failure: Arc::clone(&self.failure),
        }
    }
}

impl<A: Actor> std::fmt::Debug for PersistentAddr<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PersistentAddr")
            .field("persistence_id", &self.persistence_id)
            .field("failure", &self.failure.get())
            .finish_non_exhaustive()
    }
}

impl<A: PersistentActor> PersistentAddr<A> {
    /// Starts `actor` (recovering first) and returns its address.
    pub fn start(actor: A) -> Self {
        let failure = Arc::clone(&actor.persistence().failure);
        let persistence_id = Arc::from(actor.persistence_id());
        PersistentAddr {
            addr: actor.start(),
            persistence_id,
            failure,
        }
    }
}

impl<A: Actor> PersistentAddr<A> {
    /// The plain Actix address.
    pub fn addr(&self) -> &Addr<A> {
        &self.addr
    }

    /// The actor's persistence id.
    pub fn persistence_id(&self) -> &str {
        &self.persistence_id
    }

    /// Why the actor stopped, once it stopped on a recovery or write failure, or a panic.
    pub fn failure(&self) -> Option<&ActorFailure> {
        self.failure.get()
    }

    fn stopped(&self) -> CommandError {
        CommandError::ActorStopped {
            persistence_id: self.persistence_id.to_string(),
            cause: self.failure.get().cloned(),
        }
    }

    fn mailbox_error(&self, error: MailboxError) -> CommandError {
        match error {
            MailboxError::Closed => self.stopped(),
            source => CommandError::Mailbox {
                persistence_id: self.persistence_id.to_string(),
                source,
            },
        }
    }

    /// Sends `msg` and waits for the handler's answer, as [`Addr::send`].
    ///
    /// # Errors
    /// [`CommandError::ActorStopped`] with the actor's [`ActorFailure`] when the actor is gone.
    pub async fn send<M>(&self, msg: M) -> Result<M::Result, CommandError>
    where
        A: Handler<M>,
        A::Context: ToEnvelope<A, M>,
        M: Message + Send + 'static,
        M::Result: Send,
    {
        self.addr.send(msg).await.map_err(|e| self.mailbox_error(e))
    }

    /// Sends a command whose handler persists (its result is a [`PersistResult`]) and waits
    /// for the continuation's value. A message whose result is no `PersistResult` (a query of
    /// the state, replying `MessageResult<M>`) goes through [`send`](Self::send) instead: given
    /// to `ask`, the compiler expects its result to be `Result<_, PersistError>`.
    ///
    /// # Errors
    /// [`CommandError::ActorStopped`] with the actor's [`ActorFailure`] when the actor is gone
    /// or stopped before this command's write completed; [`CommandError::Persist`] when this
    /// command's own write was rejected or failed.
    pub async fn ask<M, R>(&self, msg: M) -> Result<R, CommandError>
    where
        A: Handler<M>,
        A::Context: ToEnvelope<A, M>,
        M: Message<Result = PersistResult<R>> + Send + 'static,
        R: Send + 'static,
    {
        match self.send(msg).await? {
            Ok(value) => Ok(value),
            Err(PersistError::ActorStopped) => Err(self.stopped()),
            Err(other) => Err(CommandError::Persist(other)),
        }
    }
}

#[cfg(test)]
mod debug_tests {
    use super::*;

    /// A `main` returning the error with `?` prints its `Debug`: the message, not the structs.
    #[test]
    fn debug_writes_the_message_and_alternate_debug_the_structure() {
        let error = CommandError::ActorStopped {
            persistence_id: "Cart|1".to_owned(),
            cause: None,
        };
        assert_eq!(
            format!("{error:?}"),
            "persistent actor \"Cart|1\" is gone (stopped normally)"
        );
        assert_eq!(format!("{error:?}"), error.to_string());
        assert!(format!("{error:#?}").starts_with("ActorStopped {"));
    }
}
