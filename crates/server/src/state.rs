//! The sandbox state machine (seed 003 "states"): one enum and one [`transition`] function.
//!
//! ```text
//! creating -> running <-> paused
//! running | paused -> hibernated -> running
//! any -> failed, any -> deleted
//! ```

use crate::error::ApiError;
use std::fmt;

/// A sandbox's lifecycle state, as stored and as shown in `status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SandboxState {
    Creating,
    Running,
    Paused,
    Hibernated,
    Failed,
    Deleted,
}

impl SandboxState {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxState::Creating => "creating",
            SandboxState::Running => "running",
            SandboxState::Paused => "paused",
            SandboxState::Hibernated => "hibernated",
            SandboxState::Failed => "failed",
            SandboxState::Deleted => "deleted",
        }
    }

    /// Parses a stored name; unknown names read as `Failed`.
    pub fn parse(s: &str) -> Self {
        match s {
            "creating" => SandboxState::Creating,
            "running" => SandboxState::Running,
            "paused" => SandboxState::Paused,
            "hibernated" => SandboxState::Hibernated,
            "deleted" => SandboxState::Deleted,
            _ => SandboxState::Failed,
        }
    }
}

impl fmt::Display for SandboxState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Checks that `from -> to` is allowed and returns `to`.
///
/// # Errors
/// 409 naming both states, e.g. `sandbox is paused; cannot go to hibernated`.
pub fn transition(from: SandboxState, to: SandboxState) -> Result<SandboxState, ApiError> {
    use SandboxState::*;
    let ok = matches!(
        (from, to),
        (Creating, Running)
            | (Running, Paused)
            | (Paused, Running)
            | (Running | Paused, Hibernated)
            | (Hibernated, Running)
            | (Creating | Running | Paused | Hibernated, Failed)
            | (Creating | Running | Paused | Hibernated | Failed, Deleted)
    );
    if ok {
        Ok(to)
    } else {
        Err(ApiError::Conflict(format!(
            "sandbox is {from}; cannot go to {to}"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::SandboxState::*;
    use super::*;

    #[test]
    fn allowed_and_forbidden_transitions() {
        assert!(transition(Creating, Running).is_ok());
        assert!(transition(Running, Paused).is_ok());
        assert!(transition(Hibernated, Running).is_ok());
        assert!(transition(Failed, Deleted).is_ok());
        assert!(transition(Paused, Hibernated).is_ok());
        let e = transition(Hibernated, Paused).unwrap_err();
        assert_eq!(e.to_string(), "sandbox is hibernated; cannot go to paused");
        assert!(transition(Deleted, Running).is_err());
        assert!(transition(Creating, Paused).is_err());
        for s in [Creating, Running, Paused, Hibernated, Failed, Deleted] {
            assert_eq!(SandboxState::parse(s.as_str()), s);
        }
    }
}
