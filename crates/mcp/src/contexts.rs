//! The code context `run_code` uses for each sandbox, so that a second call sees the first
//! one's variables. Shared by every session of an endpoint (Streamable HTTP may serve each
//! request statelessly), keyed by workspace and sandbox. The cached handle's key is never used:
//! each call rebinds it to the caller's client, so only the caller's own rights apply.

use pandastack_sdk::CodeContext;
use std::collections::HashMap;
use std::sync::Mutex;

/// Contexts kept at most; past it an arbitrary one is dropped (its next call opens a new one).
const MAX_CONTEXTS: usize = 4096;

/// `(workspace, sandbox id) -> code context`.
#[derive(Debug, Default)]
pub struct ContextCache {
    map: Mutex<HashMap<(String, String), CodeContext>>,
}

impl ContextCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), CodeContext>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The context of `sandbox` in `workspace`, if one was opened.
    pub fn get(&self, workspace: &str, sandbox: &str) -> Option<CodeContext> {
        self.lock()
            .get(&(workspace.to_string(), sandbox.to_string()))
            .cloned()
    }

    /// Remembers `ctx` as `sandbox`'s context.
    pub fn put(&self, workspace: &str, sandbox: &str, ctx: CodeContext) {
        let mut map = self.lock();
        if map.len() >= MAX_CONTEXTS {
            if let Some(k) = map.keys().next().cloned() {
                map.remove(&k);
            }
        }
        map.insert((workspace.to_string(), sandbox.to_string()), ctx);
    }

    /// Forgets `sandbox`'s context (the sandbox was killed, or the context is gone).
    pub fn forget(&self, workspace: &str, sandbox: &str) {
        self.lock()
            .remove(&(workspace.to_string(), sandbox.to_string()));
    }
}
