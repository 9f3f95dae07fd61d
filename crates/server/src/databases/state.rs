//! The database state machine (issue 10): one enum and one [`transition`] function.
//!
//! ```text
//! provisioning -> running <-> stopped        (idle stop, wake on connect / wake / always_on)
//! provisioning | running | stopped -> failed
//! any -> deleted
//! ```

use crate::error::ApiError;
use std::fmt;

/// A database's lifecycle state, as stored and as shown in `status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DatabaseState {
    Provisioning,
    Running,
    Stopped,
    Failed,
    Deleted,
}

impl DatabaseState {
    /// Every state a live database can be in, for metrics.
    pub const LIVE: [DatabaseState; 4] = [
        DatabaseState::Provisioning,
        DatabaseState::Running,
        DatabaseState::Stopped,
        DatabaseState::Failed,
    ];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            DatabaseState::Provisioning => "provisioning",
            DatabaseState::Running => "running",
            DatabaseState::Stopped => "stopped",
            DatabaseState::Failed => "failed",
            DatabaseState::Deleted => "deleted",
        }
    }

    /// Parses a stored name; unknown names read as `Failed`.
    pub fn parse(s: &str) -> Self {
        match s {
            "provisioning" => DatabaseState::Provisioning,
            "running" => DatabaseState::Running,
            "stopped" => DatabaseState::Stopped,
            "deleted" => DatabaseState::Deleted,
            _ => DatabaseState::Failed,
        }
    }
}

impl fmt::Display for DatabaseState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Checks that `from -> to` is allowed and returns `to`.
///
/// # Errors
/// 409 naming both states, e.g. `database is failed; cannot go to running`.
pub fn transition(from: DatabaseState, to: DatabaseState) -> Result<DatabaseState, ApiError> {
    use DatabaseState::*;
    let ok = matches!(
        (from, to),
        (Provisioning, Running)
            | (Running, Stopped)
            | (Stopped, Running)
            | (Provisioning | Running | Stopped, Failed)
            | (Provisioning | Running | Stopped | Failed, Deleted)
    );
    if ok {
        Ok(to)
    } else {
        Err(ApiError::Conflict(format!(
            "database is {from}; cannot go to {to}"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::DatabaseState::*;
    use super::*;

    #[test]
    fn only_listed_transitions_pass() {
        assert!(transition(Provisioning, Running).is_ok());
        assert!(transition(Running, Stopped).is_ok());
        assert!(transition(Stopped, Running).is_ok());
        assert!(transition(Failed, Deleted).is_ok());
        assert!(transition(Failed, Running).is_err());
        assert!(transition(Deleted, Running).is_err());
        assert!(transition(Stopped, Provisioning).is_err());
        for s in DatabaseState::LIVE {
            assert_eq!(DatabaseState::parse(s.as_str()), s);
        }
        assert_eq!(DatabaseState::parse("bogus"), Failed);
    }
}
