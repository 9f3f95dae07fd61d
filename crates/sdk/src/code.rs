//! Code contexts (contract §2.2, §2.3, §4; seed 004 "Stateful code context"): a persistent
//! kernel whose variables and imports survive across [`CodeContext::run_code`] calls, with rich
//! results (`image/png` charts, `text/html` tables) in each [`Execution`]. After a restore or a
//! fork, a new context adopts the kernel that was live in the snapshot (seed 000 §2).

use crate::error::{Error, Result};
use crate::http::{Call, Deadline};
use crate::sandbox::Sandbox;
use pandastack_api::{CreateContext, Execution, ReplSessions, RunCode};
use reqwest::Method;
use std::time::Duration;

/// Added to a cell's own timeout for the HTTP deadline, so the server's answer arrives first.
const DEADLINE_MARGIN: Duration = Duration::from_secs(30);

/// An open code context: a handle on one kernel in one sandbox. Cheap to clone.
#[derive(Debug, Clone)]
pub struct CodeContext {
    sandbox: Sandbox,
    info: pandastack_api::CodeContext,
}

impl Sandbox {
    /// Opens a Python code context (Py `create_code_context()`). Takes part in the warm-up retry.
    ///
    /// # Errors
    /// [`Error::Conflict`] when the sandbox is not running; as any call.
    pub async fn create_code_context(&self) -> Result<CodeContext> {
        self.create_code_context_for("python").await
    }

    /// Opens a code context for `language` (`python`; `py` and `python3` are the same).
    ///
    /// # Errors
    /// [`Error::BadRequest`] for another language; as [`Sandbox::create_code_context`].
    pub async fn create_code_context_for(&self, language: &str) -> Result<CodeContext> {
        let call = Call::new(Method::POST, &["sandboxes", self.id(), "repl", "sessions"])
            .json(&CreateContext {
                language: Some(language.to_lowercase()),
                cwd: None,
            })?
            .warmup();
        let info = self.client().json(call).await?;
        Ok(CodeContext {
            sandbox: self.clone(),
            info,
        })
    }

    /// The open contexts and live kernels (`GET .../repl/sessions`).
    ///
    /// # Errors
    /// As any call.
    pub async fn code_contexts(&self) -> Result<ReplSessions> {
        self.client()
            .json(Call::new(
                Method::GET,
                &["sandboxes", self.id(), "repl", "sessions"],
            ))
            .await
    }
}

impl CodeContext {
    /// The context id (`ctx-...`).
    pub fn id(&self) -> &str {
        &self.info.id
    }

    /// The context as the server described it: language, kernel id, whether it adopted a kernel.
    pub fn info(&self) -> &pandastack_api::CodeContext {
        &self.info
    }

    /// The sandbox the context is in.
    pub fn sandbox(&self) -> &Sandbox {
        &self.sandbox
    }

    /// The same context reached through `client` (e.g. another key of the same workspace).
    pub fn with_client(&self, client: crate::Client) -> CodeContext {
        CodeContext {
            sandbox: self.sandbox.with_client(client),
            info: self.info.clone(),
        }
    }

    /// Runs `code` in the kernel with no time limit. An exception in the cell is not an error:
    /// it is in [`Execution::error`], as in both SDKs.
    ///
    /// # Errors
    /// [`Error::NotFound`] when the context was closed; [`Error::Server`] when the kernel died.
    pub async fn run_code(&self, code: &str) -> Result<Execution> {
        self.run(code, None).await
    }

    /// Runs `code`, interrupting it after `timeout` (the kernel keeps its state): an interrupted
    /// cell comes back with `exit_code` 1 and an [`Execution::error`] ending in
    /// `TimeoutError: execution exceeded N ms`.
    ///
    /// # Errors
    /// As [`CodeContext::run_code`]; [`Error::Server`] when the kernel had to be killed because
    /// it ignored the interrupt.
    pub async fn run_code_with_timeout(&self, code: &str, timeout: Duration) -> Result<Execution> {
        self.run(code, Some(timeout)).await
    }

    async fn run(&self, code: &str, timeout: Option<Duration>) -> Result<Execution> {
        let deadline = match timeout {
            Some(t) => Deadline::After(t + DEADLINE_MARGIN),
            None => Deadline::Never,
        };
        let call = Call::new(
            Method::POST,
            &[
                "sandboxes",
                self.sandbox.id(),
                "repl",
                "sessions",
                self.id(),
                "run",
            ],
        )
        .json(&RunCode {
            code: code.to_string(),
            timeout_ms: timeout.map(|t| t.as_millis() as u64),
        })?
        .deadline(deadline);
        self.sandbox
            .client()
            .json(call)
            .await
            .map_err(Error::into_command_timeout)
    }

    /// Closes the context and stops its kernel.
    ///
    /// # Errors
    /// [`Error::NotFound`] when it was already closed.
    pub async fn close(self) -> Result<()> {
        let call = Call::new(
            Method::DELETE,
            &[
                "sandboxes",
                self.sandbox.id(),
                "repl",
                "sessions",
                self.id(),
            ],
        );
        self.sandbox.client().unit(call).await
    }
}
