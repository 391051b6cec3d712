//! What a running projection reports: its state, the offset it handled through, its lag.

/// The state of a projection instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProjectionState {
    /// Reading its stored offset and opening its source.
    Starting,
    /// Handling envelopes.
    Running,
    /// Paused: pulls no new envelope (those in flight finish, the offset is saved).
    Paused,
    /// Failed, waiting for its restart backoff; restarts from the stored offset.
    Restarting,
    /// Stopped on request (the offset of every handled envelope saved).
    Stopped,
    /// Its source ended (a `current_*` query) and every envelope was handled and saved.
    Completed,
    /// Gave up after `RestartBackoff::max_restarts` restarts.
    Failed,
    /// Stopped for good because another instance of the same projection id took ownership of
    /// it ([`ProjectionError::Fenced`](crate::ProjectionError::Fenced), in
    /// [`Progress::last_error`]); nothing of the refused write was stored.
    Fenced,
}

impl ProjectionState {
    /// Stopped, completed, failed or fenced: the projection's task has ended.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            Self::Stopped | Self::Completed | Self::Failed | Self::Fenced
        )
    }
}

/// A projection's progress, readable at any time through
/// [`ProjectionHandle`](crate::ProjectionHandle).
#[derive(Debug, Clone, PartialEq)]
pub struct Progress<O> {
    /// Current state.
    pub state: ProjectionState,
    /// The offset of the last envelope of the handled prefix: every envelope up to it was
    /// handled (or skipped); `None` before the first. Saved to the offset store in the
    /// handler's transaction (exactly-once, one at a time) or by [`SaveOffset`](crate::SaveOffset).
    pub offset: Option<O>,
    /// Envelopes handled since the projection instance started (across restarts; handled
    /// again after a restart counts again), skipped ones included. Counted once the call's
    /// transaction committed (exactly-once), so a read model can show an envelope a moment
    /// before this count does: to wait for the projection to reach a point, wait on
    /// [`offset`](Self::offset) (e.g. with `ProjectionHandle::wait_for`).
    pub handled: u64,
    /// Envelopes skipped after their retries (`AfterRetries::Skip`).
    pub skipped: u64,
    /// Write timestamp of the event at [`offset`](Self::offset), ms since the Unix epoch.
    pub last_handled_timestamp_ms: Option<i64>,
    /// Restarts after failures so far.
    pub restarts: u32,
    /// The error of the last failure, if any.
    pub last_error: Option<String>,
}

impl<O> Default for Progress<O> {
    fn default() -> Self {
        Progress {
            state: ProjectionState::Starting,
            offset: None,
            handled: 0,
            skipped: 0,
            last_handled_timestamp_ms: None,
            restarts: 0,
            last_error: None,
        }
    }
}

/// How far a projection is behind the journal (see
/// [`ProjectionHandle::lag`](crate::ProjectionHandle::lag)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lag {
    /// Events in the source after the handled offset.
    pub events: u64,
    /// Age of the oldest event not yet handled (now minus its write time), in ms; 0 when no
    /// event is behind.
    pub ms: u64,
}
