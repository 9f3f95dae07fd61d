//! The private JSON-lines protocol between the guest and `kernel.py` (documented at the top of
//! kernel.py). One line per message, UTF-8.

use pandastack_guest_protocol::Execution;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// File name of the driver, installed beside the guest binary.
pub const DRIVER: &str = "kernel.py";

/// The driver's first line, once it accepts code.
#[derive(Debug, Deserialize)]
pub struct Ready {
    pub ready: bool,
    /// False when IPython was not importable and the plain kernel runs.
    #[serde(default)]
    pub ipython: bool,
}

/// A cell to run.
#[derive(Debug, Serialize)]
pub struct RunCell<'a> {
    /// Matches the reply to the request; stale replies (after an interrupt) are skipped.
    pub seq: u64,
    /// A fresh random token per run that the driver echoes in its reply. Only the driver, and
    /// only during this run, knows it: a line forged by a cell (or left in the channel by one)
    /// cannot carry the token of a later run, so it is never taken as that run's result.
    pub nonce: &'a str,
    pub code: &'a str,
}

/// A new run token: 128 random bits as 32 hex digits.
pub fn nonce() -> String {
    let mut bytes = [0u8; 16];
    let mut filled = 0;
    while filled < bytes.len() {
        // SAFETY: getrandom writes at most `len` bytes into the buffer it is given, which is
        // the unfilled tail of `bytes`.
        let n = unsafe {
            libc::getrandom(bytes[filled..].as_mut_ptr().cast(), bytes.len() - filled, 0)
        };
        if n <= 0 {
            // getrandom cannot fail for 16 bytes once the pool is initialised; fall back to
            // the clock rather than run without a token.
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or_default();
            bytes.copy_from_slice(&t.to_le_bytes());
            break;
        }
        filled += n as usize;
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The outcome of one cell.
#[derive(Debug, Deserialize)]
pub struct CellDone {
    pub seq: Option<u64>,
    /// The run's token, echoed ([`RunCell::nonce`]).
    #[serde(default)]
    pub nonce: Option<String>,
    #[serde(default)]
    pub results: Vec<BTreeMap<String, String>>,
    #[serde(default)]
    pub stdout: String,
    #[serde(default)]
    pub stderr: String,
    pub error: Option<String>,
    #[serde(default)]
    pub exit_code: i32,
    #[serde(default)]
    pub duration_ms: u64,
}

impl CellDone {
    /// The protocol's view of this outcome.
    pub fn into_execution(self) -> Execution {
        Execution {
            results: self.results,
            stdout: self.stdout,
            stderr: self.stderr,
            error: self.error,
            exit_code: self.exit_code,
            duration_ms: self.duration_ms,
            timed_out: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_driver_lines() {
        let r: Ready =
            serde_json::from_str(r#"{"ready": true, "ipython": false, "python": "3"}"#).unwrap();
        assert!(r.ready && !r.ipython);
        let d: CellDone = serde_json::from_str(
            r#"{"seq": 3, "results": [{"text/plain": "2"}], "stdout": "", "stderr": "", "error": null, "exit_code": 0, "duration_ms": 1}"#,
        )
        .unwrap();
        assert_eq!(d.seq, Some(3));
        assert_eq!(d.into_execution().results[0]["text/plain"], "2");
        let line = serde_json::to_string(&RunCell {
            seq: 1,
            nonce: "ab",
            code: "1+1",
        })
        .unwrap();
        assert_eq!(line, r#"{"seq":1,"nonce":"ab","code":"1+1"}"#);
    }

    #[test]
    fn run_tokens_are_fresh_and_long() {
        let (a, b) = (nonce(), nonce());
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }
}
