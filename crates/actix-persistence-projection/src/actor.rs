//! A projection as an Actix actor: the app starts it under its system, and other actors pause,
//! resume and read it by message.

use std::marker::PhantomData;

use actix::{Actor, Context, Handler, Message};

use crate::handle::ProjectionHandle;
use crate::progress::Progress;

/// Owns a running projection; stopping the actor stops the projection (in-flight envelopes
/// finish, the handled offset is saved).
///
/// ```ignore
/// let actor = ProjectionActor::new(projection.start()).start();
/// actor.send(PauseProjection).await?;
/// ```
pub struct ProjectionActor<O: Clone + Send + Sync + 'static> {
    handle: Option<ProjectionHandle<O>>,
}

impl<O: Clone + Send + Sync + 'static> ProjectionActor<O> {
    /// An actor over a started projection.
    pub fn new(handle: ProjectionHandle<O>) -> Self {
        ProjectionActor {
            handle: Some(handle),
        }
    }
}

impl<O: Clone + Send + Sync + Unpin + 'static> Actor for ProjectionActor<O> {
    type Context = Context<Self>;

    fn stopped(&mut self, _: &mut Context<Self>) {
        if let Some(handle) = self.handle.take() {
            // Stops the projection; its task saves the offset and ends on its own.
            drop(handle);
        }
    }
}

/// Asks a [`ProjectionActor`] to pause its projection.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct PauseProjection;

/// Asks a [`ProjectionActor`] to resume its projection.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct ResumeProjection;

/// Asks a [`ProjectionActor`] for its projection's progress (`None` once it was stopped).
pub struct GetProgress<O>(PhantomData<fn() -> O>);

impl<O> GetProgress<O> {
    /// The message.
    pub fn new() -> Self {
        GetProgress(PhantomData)
    }
}

impl<O> Default for GetProgress<O> {
    fn default() -> Self {
        Self::new()
    }
}

impl<O> std::fmt::Debug for GetProgress<O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GetProgress")
    }
}

impl<O: Clone + Send + Sync + 'static> Message for GetProgress<O> {
    type Result = Option<Progress<O>>;
}

impl<O: Clone + Send + Sync + Unpin + 'static> Handler<PauseProjection> for ProjectionActor<O> {
    type Result = ();

    fn handle(&mut self, _: PauseProjection, _: &mut Context<Self>) {
        if let Some(handle) = &self.handle {
            handle.pause();
        }
    }
}

impl<O: Clone + Send + Sync + Unpin + 'static> Handler<ResumeProjection> for ProjectionActor<O> {
    type Result = ();

    fn handle(&mut self, _: ResumeProjection, _: &mut Context<Self>) {
        if let Some(handle) = &self.handle {
            handle.resume();
        }
    }
}

impl<O: Clone + Send + Sync + Unpin + 'static> Handler<GetProgress<O>> for ProjectionActor<O> {
    type Result = Option<Progress<O>>;

    fn handle(&mut self, _: GetProgress<O>, _: &mut Context<Self>) -> Self::Result {
        self.handle.as_ref().map(ProjectionHandle::progress)
    }
}
