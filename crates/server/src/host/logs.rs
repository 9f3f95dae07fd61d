//! Sandbox logs (contract §2.2, §3.2): what the sandbox's commands and kernels wrote to their
//! stdout and stderr, kept per sandbox as complete lines in a ring of at most
//! [`MAX_LOG_BYTES`] (oldest lines dropped first), with a broadcast for `follow` subscribers.
//! Logs live in server memory: they do not survive a server restart.

use std::collections::VecDeque;
use std::sync::Mutex;
use tokio::sync::broadcast;

/// Bytes of log lines kept per sandbox.
pub const MAX_LOG_BYTES: usize = 1024 * 1024;
/// Longest line kept; longer ones are split.
const MAX_LINE_BYTES: usize = 16 * 1024;

/// Which stream a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogStream {
    Stdout,
    Stderr,
}

impl LogStream {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            LogStream::Stdout => "stdout",
            LogStream::Stderr => "stderr",
        }
    }
}

/// One complete line.
#[derive(Debug, Clone)]
pub struct LogLine {
    pub stream: LogStream,
    pub line: String,
}

#[derive(Default)]
struct Ring {
    lines: VecDeque<LogLine>,
    bytes: usize,
    partial: [Vec<u8>; 2],
}

/// A sandbox's log.
pub struct SandboxLog {
    ring: Mutex<Ring>,
    tx: broadcast::Sender<LogLine>,
}

impl Default for SandboxLog {
    fn default() -> Self {
        SandboxLog {
            ring: Mutex::default(),
            tx: broadcast::channel(256).0,
        }
    }
}

impl SandboxLog {
    /// Appends raw output bytes of `stream`; complete lines are stored and broadcast.
    pub fn append(&self, stream: LogStream, bytes: &[u8]) {
        let mut ring = self.ring.lock().unwrap_or_else(|e| e.into_inner());
        let idx = stream as usize;
        ring.partial[idx].extend_from_slice(bytes);
        let mut lines = Vec::new();
        loop {
            let buf = &mut ring.partial[idx];
            let cut = match buf.iter().position(|b| *b == b'\n') {
                Some(i) => i + 1,
                None if buf.len() >= MAX_LINE_BYTES => MAX_LINE_BYTES,
                None => break,
            };
            let rest = buf.split_off(cut);
            let mut line = std::mem::replace(buf, rest);
            if line.last() == Some(&b'\n') {
                line.pop();
            }
            lines.push(LogLine {
                stream,
                line: String::from_utf8_lossy(&line).into_owned(),
            });
        }
        for l in lines {
            ring.bytes += l.line.len() + 1;
            ring.lines.push_back(l.clone());
            let _ = self.tx.send(l);
        }
        while ring.bytes > MAX_LOG_BYTES {
            match ring.lines.pop_front() {
                Some(old) => ring.bytes -= old.line.len() + 1,
                None => break,
            }
        }
    }

    /// Ends a run: a trailing line without a newline is kept as a line.
    pub fn flush(&self, stream: LogStream) {
        let pending = {
            let mut ring = self.ring.lock().unwrap_or_else(|e| e.into_inner());
            std::mem::take(&mut ring.partial[stream as usize])
        };
        if !pending.is_empty() {
            let mut with_nl = pending;
            with_nl.push(b'\n');
            self.append(stream, &with_nl);
        }
    }

    /// The stored lines of `filter` (None: both), and a subscription to new ones taken at the
    /// same moment (so a follower misses nothing and sees nothing twice).
    pub fn lines(&self, filter: Option<LogStream>) -> (Vec<LogLine>, broadcast::Receiver<LogLine>) {
        let ring = self.ring.lock().unwrap_or_else(|e| e.into_inner());
        let rx = self.tx.subscribe();
        (
            ring.lines
                .iter()
                .filter(|l| filter.is_none_or(|f| f == l.stream))
                .cloned()
                .collect(),
            rx,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_split_bounded_and_filtered() {
        let log = SandboxLog::default();
        log.append(LogStream::Stdout, b"a\nb");
        log.append(LogStream::Stderr, b"err\n");
        log.append(LogStream::Stdout, b"c\n");
        let (all, _) = log.lines(None);
        assert_eq!(
            all.iter().map(|l| l.line.as_str()).collect::<Vec<_>>(),
            ["a", "err", "bc"]
        );
        let (out, _) = log.lines(Some(LogStream::Stderr));
        assert_eq!(out.len(), 1);
        for _ in 0..2000 {
            log.append(LogStream::Stdout, &[b'x'; 1023]);
            log.append(LogStream::Stdout, b"\n");
        }
        let ring = log.ring.lock().unwrap();
        assert!(ring.bytes <= MAX_LOG_BYTES);
    }
}
