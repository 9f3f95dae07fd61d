//! The warm shell: the next shell-syntax exec's bash, started ahead of time.
//!
//! Starting bash costs ~10-20 ms under gVisor's ptrace platform (its own loader and start-up
//! system calls), which dominates a short `ls | wc -l`. After each shell exec the guest starts
//! one bash with the same environment and working directory, blocked reading its command from
//! a pipe:
//!
//! ```text
//! bash --norc --noprofile -c 'IFS= read -r -d "" __c; exec </dev/null; eval "unset -v __c; $__c"'
//! ```
//!
//! The next exec with that environment and directory writes its command line (NUL-terminated)
//! into the pipe instead of starting a bash, so it runs exactly as `bash -c CMD` would, minus
//! the start-up. Any other exec starts a fresh bash as before. The warm shell's exit status
//! reaches the exec through a callback slot filled when the shell is claimed.

use super::spawn::Child;
use crate::reaper::OnExit;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// The script the warm bash runs.
pub const SCRIPT: &str = r#"IFS= read -r -d '' __c; exec </dev/null; eval "unset -v __c; $__c""#;

/// Where a warm shell's exit status goes once an exec claims it.
#[derive(Default)]
pub struct ExitSlot {
    target: Mutex<Option<OnExit>>,
    dead: AtomicBool,
}

impl ExitSlot {
    /// The callback registered with the reaper when the shell is started.
    pub fn forwarder(self: &Arc<Self>) -> OnExit {
        let slot = Arc::clone(self);
        Box::new(move |status| {
            slot.dead.store(true, Ordering::SeqCst);
            if let Some(target) = slot.target.lock().ok().and_then(|mut t| t.take()) {
                target(status);
            }
        })
    }
}

/// A started, waiting bash.
pub struct WarmShell {
    /// Environment and working directory it was started with.
    pub key: (BTreeMap<String, String>, PathBuf),
    pub child: Child,
    /// The pipe its command arrives on.
    pub command_in: File,
    pub slot: Arc<ExitSlot>,
}

impl WarmShell {
    /// Hands `cmd` to the shell, routing its exit to `on_exit`. Returns the running child, or
    /// None when the shell died while waiting (the caller starts a fresh one).
    pub fn claim(mut self, cmd: &str, on_exit: OnExit) -> Option<Child> {
        *self.slot.target.lock().ok()? = Some(on_exit);
        if self.slot.dead.load(Ordering::SeqCst) {
            return None;
        }
        let mut line = cmd.as_bytes().to_vec();
        line.push(0);
        self.command_in.write_all(&line).ok()?;
        drop(self.command_in);
        Some(self.child)
    }
}
