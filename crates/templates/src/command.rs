//! Runs a program and streams its stdout and stderr, line by line, to a callback.
//!
//! Two reader threads forward lines over a channel so the callback (which need
//! not be `Send`) runs on the calling thread, in arrival order.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::thread;

use crate::error::{BakeError, BakeStep};

/// Lines of output kept for [`BakeError::Command::log_tail`].
const TAIL_LINES: usize = 20;

/// Runs `cmd` with stdin closed, passing each output line to `log`.
///
/// # Errors
/// [`BakeError::Spawn`] if it cannot start, [`BakeError::Command`] (with the
/// last output lines) if it exits unsuccessfully.
pub(crate) fn run_streamed(
    step: BakeStep,
    mut cmd: Command,
    log: &mut dyn FnMut(&str),
) -> Result<(), BakeError> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| BakeError::Spawn {
            step,
            program: program.clone(),
            source,
        })?;

    let (tx, rx) = mpsc::channel::<String>();
    let readers: Vec<_> = [
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    ]
    .into_iter()
    .flatten()
    .map(|pipe| {
        let tx = tx.clone();
        thread::spawn(move || forward_lines(pipe, tx))
    })
    .collect();
    drop(tx);

    let mut tail = VecDeque::with_capacity(TAIL_LINES);
    for line in rx {
        log(&line);
        if tail.len() == TAIL_LINES {
            tail.pop_front();
        }
        tail.push_back(line);
    }
    for reader in readers {
        // A reader only ends by EOF or read error; a panic there is a bug worth surfacing.
        let _ = reader.join();
    }
    let status = child
        .wait()
        .map_err(|source| BakeError::Io { step, source })?;
    if status.success() {
        Ok(())
    } else {
        Err(BakeError::Command {
            step,
            program,
            status: status.to_string(),
            log_tail: tail.into(),
        })
    }
}

/// Splits `pipe` into lines (lossy UTF-8, trailing `\r` dropped) and sends them.
fn forward_lines(pipe: Box<dyn Read + Send>, tx: mpsc::Sender<String>) {
    let mut reader = BufReader::new(pipe);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match reader.read_until(b'\n', &mut buf) {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                let line = String::from_utf8_lossy(&buf);
                let line = line.trim_end_matches(['\n', '\r']);
                if tx.send(line.to_owned()).is_err() {
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_both_pipes_and_reports_failure_tail() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo out; echo err >&2; exit 3"]);
        let mut lines = Vec::new();
        let err = run_streamed(BakeStep::Verify, cmd, &mut |l| lines.push(l.to_owned()))
            .expect_err("exit 3 is a failure");
        lines.sort();
        assert_eq!(lines, ["err", "out"]);
        match err {
            BakeError::Command {
                status, log_tail, ..
            } => {
                assert!(status.contains('3'));
                assert_eq!(log_tail.len(), 2);
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn missing_program_is_a_spawn_error() {
        let cmd = Command::new("/nonexistent/program");
        let err = run_streamed(BakeStep::Bootstrap, cmd, &mut |_| {});
        assert!(matches!(err, Err(BakeError::Spawn { .. })));
    }
}
