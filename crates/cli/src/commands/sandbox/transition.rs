//! `sandbox pause|resume|hibernate|wake ID`: `POST /v1/sandboxes/{id}/<verb>` with no body
//! (contract §2.2; seed 003). The reply body is not used; the server answers 409 naming the
//! current state when the transition is not allowed from it.

use crate::commands::{print_json, Ctx};
use crate::error::Result;
use crate::output;

/// A state change requested by the user.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// running -> paused: vCPUs halted, memory kept.
    Pause,
    /// paused -> running.
    Resume,
    /// -> hibernated: memory written to disk, sandbox stopped.
    Hibernate,
    /// hibernated -> running.
    Wake,
}

impl Transition {
    /// The path segment: `pause`, `resume`, `hibernate`, `wake`.
    pub fn verb(self) -> &'static str {
        match self {
            Transition::Pause => "pause",
            Transition::Resume => "resume",
            Transition::Hibernate => "hibernate",
            Transition::Wake => "wake",
        }
    }

    /// The past tense printed on success.
    pub fn done(self) -> &'static str {
        match self {
            Transition::Pause => "paused",
            Transition::Resume => "resumed",
            Transition::Hibernate => "hibernated",
            Transition::Wake => "woke",
        }
    }
}

/// Requests the transition; prints e.g. `paused sandbox ID`.
pub fn run(t: Transition, id: &str, ctx: &Ctx) -> Result<()> {
    let client = ctx.client()?;
    let sandbox = ctx.block(client.sandboxes().get(id))?;
    let after = ctx.block(async {
        match t {
            Transition::Pause => sandbox.pause().await,
            Transition::Resume => sandbox.resume().await,
            Transition::Hibernate => sandbox.hibernate().await,
            Transition::Wake => sandbox.wake().await,
        }
    })?;
    if ctx.json() {
        return print_json(&after);
    }
    output::line(&format!("{} sandbox {id}", t.done()))
}
