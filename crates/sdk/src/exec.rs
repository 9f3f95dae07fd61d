//! One-shot commands (contract §2.2, §3.1, §4; seed 004 "One-shot exec"): `exec` waits for the
//! whole [`ExecResult`]; `exec_stream` returns an [`ExecStream`] of output chunks as the
//! command writes them, ending with its exit code. Each call spawns a fresh process, so nothing
//! persists between them (use a [`crate::CodeContext`] for that).

use crate::error::{is_timeout_message, Error, Result};
use crate::http::{Call, Deadline};
use crate::sandbox::Sandbox;
use crate::sse::{decode, SseReader};
use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use pandastack_api::{ExecChunk, ExecExit, ExecRequest, ExecResult, StreamError};
use reqwest::Method;
use std::collections::BTreeMap;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

/// The server's timeout when a request gives none, seconds (`crates/server` `exec.rs`).
const SERVER_DEFAULT_TIMEOUT_SECONDS: u64 = 300;
/// Added to a command's own timeout for the HTTP deadline, so the server's 504 arrives first.
const DEADLINE_MARGIN: Duration = Duration::from_secs(30);
/// Partial output kept per stream for [`Error::ExecInterrupted`], bytes.
const PARTIAL_KEEP_BYTES: usize = 64 * 1024;

/// Options of an exec.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExecOptions {
    /// Kill the command's process group after this many seconds (server default 300; 0: none).
    pub timeout_seconds: Option<u64>,
    /// Extra environment for this command.
    pub env: BTreeMap<String, String>,
    /// Working directory (server default `/workspace`).
    pub cwd: Option<String>,
    /// Return [`Error::CommandFailed`] when the exit code is not 0 (Py `check=True`).
    pub check: bool,
}

impl ExecOptions {
    /// Options with a timeout, seconds.
    pub fn timeout(seconds: u64) -> ExecOptions {
        ExecOptions {
            timeout_seconds: Some(seconds),
            ..ExecOptions::default()
        }
    }

    fn request(&self, cmd: &str) -> ExecRequest {
        ExecRequest {
            cmd: cmd.to_string(),
            timeout_seconds: self.timeout_seconds,
            env: (!self.env.is_empty()).then(|| self.env.clone()),
            cwd: self.cwd.clone(),
            background: None,
        }
    }

    /// The HTTP deadline of a non-streaming exec: the command's timeout plus a margin, none
    /// for `timeout_seconds: 0`.
    fn deadline(&self) -> Deadline {
        match self
            .timeout_seconds
            .unwrap_or(SERVER_DEFAULT_TIMEOUT_SECONDS)
        {
            0 => Deadline::Never,
            s => Deadline::After(Duration::from_secs(s) + DEADLINE_MARGIN),
        }
    }
}

/// The interpreter of [`Sandbox::run_code`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Language {
    /// `python3 -c CODE`.
    Python,
    /// `bash -c CODE`.
    Shell,
}

impl Language {
    /// The shell command that runs `code`, byte for byte as the Python SDK sends it (contract
    /// §2.2 `run_code`): `python3 -c <quoted>` or `bash -c <quoted>`.
    pub fn command(self, code: &str) -> String {
        match self {
            Language::Python => format!("python3 -c {}", shell_quote(code)),
            Language::Shell => format!("bash -c {}", shell_quote(code)),
        }
    }
}

/// Python's `shlex.quote`: unchanged when made only of `[A-Za-z0-9_@%+=:,./-]`, `''` when
/// empty, otherwise wrapped in single quotes with each `'` written as `'"'"'`.
pub fn shell_quote(s: &str) -> String {
    if s.is_empty() {
        return "''".into();
    }
    let safe = |c: char| c.is_ascii_alphanumeric() || "_@%+=:,./-".contains(c);
    if s.chars().all(safe) {
        return s.to_string();
    }
    format!("'{}'", s.replace('\'', "'\"'\"'"))
}

/// One item of an [`ExecStream`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecEvent {
    /// Text the command wrote to stdout.
    Stdout(String),
    /// Text the command wrote to stderr.
    Stderr(String),
    /// The command ended with this exit code; the stream ends after it.
    Exit(i32),
}

/// What [`ExecStream::finish`] collected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecOutput {
    pub stdout: String,
    pub stderr: String,
    pub exit_code: i32,
}

/// The output of a running command as it arrives (`POST .../exec/stream`, contract §3.1).
///
/// Yields [`ExecEvent`]s; ends after [`ExecEvent::Exit`]. Errors: [`Error::Timeout`] when the
/// command ran past its timeout, [`Error::Stream`] when the server gave up on it,
/// [`Error::ExecInterrupted`] when the stream ended without an exit code, [`Error::Connection`]
/// when the connection broke. Dropping the stream before the end kills the command.
pub struct ExecStream {
    inner: BoxStream<'static, Result<ExecEvent>>,
}

impl Stream for ExecStream {
    type Item = Result<ExecEvent>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(cx)
    }
}

impl ExecStream {
    /// Drains the stream, handing each chunk to `on_stdout` / `on_stderr`; returns the exit code
    /// (Py `exec_stream(cmd, on_stdout, on_stderr)`).
    ///
    /// # Errors
    /// As the stream's items.
    pub async fn wait(
        mut self,
        mut on_stdout: impl FnMut(&str),
        mut on_stderr: impl FnMut(&str),
    ) -> Result<i32> {
        while let Some(ev) = self.next().await {
            match ev? {
                ExecEvent::Stdout(c) => on_stdout(&c),
                ExecEvent::Stderr(c) => on_stderr(&c),
                ExecEvent::Exit(code) => return Ok(code),
            }
        }
        Err(Error::ExecInterrupted {
            partial_stdout: String::new(),
            partial_stderr: String::new(),
        })
    }

    /// Drains the stream into one [`ExecOutput`].
    ///
    /// # Errors
    /// As the stream's items.
    pub async fn finish(self) -> Result<ExecOutput> {
        let (mut stdout, mut stderr) = (String::new(), String::new());
        let exit_code = self
            .wait(|c| stdout.push_str(c), |c| stderr.push_str(c))
            .await?;
        Ok(ExecOutput {
            stdout,
            stderr,
            exit_code,
        })
    }
}

/// Appends `chunk` to `tail`, keeping only its last [`PARTIAL_KEEP_BYTES`].
fn keep_tail(tail: &mut String, chunk: &str) {
    tail.push_str(chunk);
    if tail.len() > PARTIAL_KEEP_BYTES {
        let mut cut = tail.len() - PARTIAL_KEEP_BYTES;
        while !tail.is_char_boundary(cut) {
            cut += 1;
        }
        tail.drain(..cut);
    }
}

struct StreamState {
    sse: SseReader,
    stdout_tail: String,
    stderr_tail: String,
    ended: bool,
}

async fn next_event(st: &mut StreamState) -> Option<Result<ExecEvent>> {
    const WHAT: &str = "exec stream";
    if st.ended {
        return None;
    }
    loop {
        let ev = match st.sse.next().await {
            Ok(Some(ev)) => ev,
            Ok(None) => {
                st.ended = true;
                return Some(Err(Error::ExecInterrupted {
                    partial_stdout: std::mem::take(&mut st.stdout_tail),
                    partial_stderr: std::mem::take(&mut st.stderr_tail),
                }));
            }
            Err(e) => {
                st.ended = true;
                return Some(Err(e));
            }
        };
        let item = match ev.name.as_str() {
            "stdout" => decode::<ExecChunk>(&ev, WHAT).map(|c| {
                keep_tail(&mut st.stdout_tail, &c.chunk);
                ExecEvent::Stdout(c.chunk)
            }),
            "stderr" => decode::<ExecChunk>(&ev, WHAT).map(|c| {
                keep_tail(&mut st.stderr_tail, &c.chunk);
                ExecEvent::Stderr(c.chunk)
            }),
            "exit" => decode::<ExecExit>(&ev, WHAT).map(|e| ExecEvent::Exit(e.exit_code)),
            "error" => Err(match decode::<StreamError>(&ev, WHAT) {
                Ok(e) if is_timeout_message(&e.error) => Error::Timeout { message: e.error },
                Ok(e) => Error::Stream { message: e.error },
                Err(d) => d,
            }),
            _ => continue,
        };
        st.ended = !matches!(item, Ok(ExecEvent::Stdout(_) | ExecEvent::Stderr(_)));
        return Some(item);
    }
}

impl Sandbox {
    /// Runs `cmd` (`bash -c` semantics) and waits for it, with the server's default timeout
    /// (300 s).
    ///
    /// # Errors
    /// [`Error::Timeout`] past the timeout; [`Error::NotFound`]; [`Error::Conflict`] when the
    /// sandbox is not running (a hibernated one is woken); others as any call.
    pub async fn exec(&self, cmd: &str) -> Result<ExecResult> {
        self.exec_with(cmd, &ExecOptions::default()).await
    }

    /// Runs `cmd` with `opts` and waits for it (`POST .../exec`). Takes part in the warm-up
    /// retry (contract §1.4). The HTTP deadline is the command's timeout plus 30 s.
    ///
    /// # Errors
    /// As [`Sandbox::exec`]; [`Error::CommandFailed`] for a non-zero exit with `opts.check`.
    pub async fn exec_with(&self, cmd: &str, opts: &ExecOptions) -> Result<ExecResult> {
        let call = Call::new(Method::POST, &["sandboxes", self.id(), "exec"])
            .json(&opts.request(cmd))?
            .deadline(opts.deadline())
            .warmup();
        let result: ExecResult = self
            .client()
            .json(call)
            .await
            .map_err(Error::into_command_timeout)?;
        if opts.check && result.exit_code != 0 {
            return Err(Error::CommandFailed {
                exit_code: result.exit_code,
                stdout: result.stdout,
                stderr: result.stderr,
            });
        }
        Ok(result)
    }

    /// Starts `cmd` and streams its output (`POST .../exec/stream`, SSE). No HTTP deadline: the
    /// command's own timeout applies. `opts.check` is not used (read the exit code).
    ///
    /// # Errors
    /// Before the stream starts, as [`Sandbox::exec`]; then as [`ExecStream`]'s items.
    pub async fn exec_stream(&self, cmd: &str, opts: &ExecOptions) -> Result<ExecStream> {
        let call = Call::new(Method::POST, &["sandboxes", self.id(), "exec", "stream"])
            .json(&opts.request(cmd))?
            .deadline(Deadline::Never)
            .accept("text/event-stream")
            .warmup();
        let resp = self.client().send(call).await?;
        let state = StreamState {
            sse: SseReader::new(resp),
            stdout_tail: String::new(),
            stderr_tail: String::new(),
            ended: false,
        };
        let inner = futures::stream::unfold(state, |mut st| async move {
            next_event(&mut st).await.map(|item| (item, st))
        })
        .boxed();
        Ok(ExecStream { inner })
    }

    /// Runs a Python or shell snippet in a fresh process, as the Python SDK's
    /// `Sandbox.run_code(code, language)` does (contract §2.2): an exec of
    /// `python3 -c <quoted>` / `bash -c <quoted>` (seed 004 "Run Python code"). Nothing
    /// persists between calls; use [`Sandbox::create_code_context`] for state.
    ///
    /// # Errors
    /// As [`Sandbox::exec`].
    pub async fn run_code(&self, code: &str, language: Language) -> Result<ExecResult> {
        self.exec(&language.command(code)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_match_the_python_sdk() {
        assert_eq!(
            Language::Python.command("x = 42; y = x * 2; print(x, y)"),
            "python3 -c 'x = 42; y = x * 2; print(x, y)'"
        );
        assert_eq!(
            Language::Shell.command("python --version"),
            "bash -c 'python --version'"
        );
        assert_eq!(
            Language::Python.command("print('a')"),
            "python3 -c 'print('\"'\"'a'\"'\"')'"
        );
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_quote("/a/b.csv"), "/a/b.csv");
    }

    #[test]
    fn deadlines_follow_the_command_timeout() {
        assert_eq!(
            ExecOptions::default().deadline(),
            Deadline::After(Duration::from_secs(330))
        );
        assert_eq!(ExecOptions::timeout(0).deadline(), Deadline::Never);
        assert_eq!(
            ExecOptions::timeout(5).deadline(),
            Deadline::After(Duration::from_secs(35))
        );
    }

    #[test]
    fn partial_output_keeps_the_tail_on_char_boundaries() {
        let mut t = String::new();
        keep_tail(&mut t, &"é".repeat(PARTIAL_KEEP_BYTES));
        keep_tail(&mut t, "end");
        assert!(t.len() <= PARTIAL_KEEP_BYTES && t.ends_with("end"));
    }

    #[test]
    fn request_omits_empty_env() {
        let r = ExecOptions::default().request("true");
        assert_eq!(r.env, None);
        assert_eq!(r.timeout_seconds, None);
    }
}
