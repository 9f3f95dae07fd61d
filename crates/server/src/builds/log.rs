//! The log of one template build: a file (`<data_dir>/template-builds/<id>/build.log`, one line
//! per line of output, kept after the build) plus a watch channel that tells followers a line
//! was added; dropping the writer tells them the build ended.
//!
//! Lines are split on `\n` and `\r` (SSE data cannot carry either, and a progress bar's `\r`
//! updates read best as lines) with other control characters dropped, and the file stops
//! growing at [`MAX_LOG_BYTES`] (one note says so), so a chatty `RUN` cannot fill the disk.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use tokio::sync::watch;

/// Largest log kept per build, bytes.
pub const MAX_LOG_BYTES: u64 = 16 * 1024 * 1024;

/// File name of a build's log inside its directory.
pub const LOG_FILE: &str = "build.log";

/// Appends to a build's log. Cheap to share (`&BuildLog` from every step).
pub struct BuildLog {
    inner: Mutex<Writer>,
    lines: watch::Sender<u64>,
}

struct Writer {
    file: Option<File>,
    bytes: u64,
    count: u64,
    /// An unfinished line of output (a chunk that did not end in a newline).
    partial: String,
}

impl BuildLog {
    /// Creates (truncates) the log at `path`.
    ///
    /// # Errors
    /// I/O errors creating the file.
    pub fn create(path: &Path) -> std::io::Result<Self> {
        let file = File::create(path)?;
        let (lines, _) = watch::channel(0);
        Ok(BuildLog {
            inner: Mutex::new(Writer {
                file: Some(file),
                bytes: 0,
                count: 0,
                partial: String::new(),
            }),
            lines,
        })
    }

    /// A receiver that sees the line count change, and an error once the log is closed.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.lines.subscribe()
    }

    /// Appends one message (which may hold several lines).
    pub fn line(&self, text: &str) {
        let mut w = self.lock();
        for l in split_lines(text) {
            w.write_line(&l);
        }
        let count = w.count;
        drop(w);
        self.lines.send_replace(count);
    }

    /// Appends a chunk of command output: complete lines now, a trailing partial line once
    /// it is finished (or at [`BuildLog::flush_output`]).
    pub fn output(&self, chunk: &[u8]) {
        let mut w = self.lock();
        let text = String::from_utf8_lossy(chunk);
        let mut buf = std::mem::take(&mut w.partial);
        buf.push_str(&text);
        let (complete, rest) = match buf.rfind(['\n', '\r']) {
            Some(i) => (buf[..i].to_string(), buf[i + 1..].to_string()),
            None => (String::new(), buf),
        };
        for l in split_lines(&complete) {
            w.write_line(&l);
        }
        // A line without an end is still cut at 4 KiB so it cannot grow without bound.
        if rest.len() > 4096 {
            w.write_line(&clean(&rest));
        } else {
            w.partial = rest;
        }
        let count = w.count;
        drop(w);
        self.lines.send_replace(count);
    }

    /// Writes out a partial line left by [`BuildLog::output`].
    pub fn flush_output(&self) {
        let mut w = self.lock();
        let rest = std::mem::take(&mut w.partial);
        if !rest.is_empty() {
            w.write_line(&clean(&rest));
        }
        let count = w.count;
        drop(w);
        self.lines.send_replace(count);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Writer> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Writer {
    fn write_line(&mut self, line: &str) {
        let Some(file) = self.file.as_mut() else {
            return;
        };
        let len = line.len() as u64 + 1;
        if self.bytes + len > MAX_LOG_BYTES {
            let _ = writeln!(
                file,
                "[log truncated at {} MiB; the build goes on]",
                MAX_LOG_BYTES / (1024 * 1024)
            );
            self.file = None;
            self.count += 1;
            return;
        }
        // A full disk shows up in the build itself; the log is best effort.
        if writeln!(file, "{line}").is_ok() {
            self.bytes += len;
            self.count += 1;
        }
    }
}

/// `text` split on `\n` and `\r` (a `\r\n` pair is one break), control characters removed.
fn split_lines(text: &str) -> Vec<String> {
    text.replace("\r\n", "\n")
        .split(['\n', '\r'])
        .map(clean)
        .collect()
}

/// Drops control characters other than tab.
fn clean(s: &str) -> String {
    s.chars()
        .filter(|c| !c.is_control() || *c == '\t')
        .collect()
}

/// Where the log of build `id` lives under `builds_dir`.
pub fn log_path(builds_dir: &Path, id: &str) -> PathBuf {
    builds_dir.join(id).join(LOG_FILE)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> PathBuf {
        let p =
            std::env::temp_dir().join(format!("pandastack-buildlog-{name}-{}", std::process::id()));
        let _ = std::fs::remove_file(&p);
        p
    }

    #[test]
    fn lines_are_split_cleaned_and_counted() {
        let path = temp("split");
        let log = BuildLog::create(&path).unwrap();
        let rx = log.subscribe();
        log.line("Step 1/2 : RUN true");
        log.output(b"a\r\nb\x1b[0m\nprogress 10%\rprogress 20%\rpart");
        log.output(b"ial\n\n");
        log.flush_output();
        assert_eq!(*rx.borrow(), 7);
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(
            text,
            "Step 1/2 : RUN true\na\nb[0m\nprogress 10%\nprogress 20%\npartial\n\n"
        );
        let _ = std::fs::remove_file(&path);
    }
}
