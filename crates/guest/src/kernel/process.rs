//! The kernel process and its channel: spawning `python3 -u kernel.py`, a thread turning the
//! lines it sends into [`Event::Line`]s, and a thread keeping the tail of its stderr for error
//! messages.
//!
//! The channel is one end of a socket pair (the kernel's stdin and stdout), not pipes: a socket
//! cannot be reopened through `/proc/<pid>/fd/N` (ENXIO), so no other process in the sandbox
//! can write into the channel or read from it (issue 8: forged kernel results). The driver
//! also makes itself non-dumpable, which stops other processes from ptrace-ing it.

use crate::reaper::Reaper;
use crate::setup::Config;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, ChildStderr, Command, Stdio};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};

/// Bytes of kernel stderr kept.
pub const STDERR_TAIL_BYTES: usize = 4096;

/// What a kernel worker hears from its kernel.
#[derive(Debug)]
pub enum Event {
    /// One line of the driver's protocol output (without the newline).
    Line(String),
    /// The driver's stdout reached end of stream.
    Closed,
    /// The process exited with this raw wait status.
    Exited(i32),
}

/// Spawns the driver at `driver` with the default environment plus `env`, its stdin and stdout
/// one end of a socket pair; returns the process and the other end. Its exit is sent to
/// `events` and given to `on_exit` (raw wait status; runs on the reaper thread).
pub fn spawn(
    reaper: &Reaper,
    config: &Config,
    driver: &Path,
    env: &BTreeMap<String, String>,
    events: Sender<Event>,
    on_exit: Box<dyn FnOnce(i32) + Send>,
) -> std::io::Result<(Child, UnixStream)> {
    let (ours, theirs) = UnixStream::pair()?;
    let theirs_out = theirs.try_clone()?;
    let mut cmd = Command::new("python3");
    cmd.arg("-u")
        .arg(driver)
        .env_clear()
        .envs(&config.env)
        .envs(env)
        .current_dir(&config.cwd)
        .stdin(Stdio::from(OwnedFd::from(theirs)))
        .stdout(Stdio::from(OwnedFd::from(theirs_out)))
        .stderr(Stdio::piped())
        .process_group(0);
    if let Some(limit) = crate::limits::child_process_limit() {
        // SAFETY: the closure runs in the forked child before exec and makes one
        // async-signal-safe system call (setrlimit), allocating nothing.
        unsafe {
            cmd.pre_exec(move || {
                crate::limits::apply(&limit);
                Ok(())
            });
        }
    }
    let child = reaper.spawn(
        &mut cmd,
        Box::new(move |status| {
            on_exit(status);
            let _ = events.send(Event::Exited(status));
        }),
    )?;
    // `cmd` still holds the child's ends: dropping it closes them here, so the channel ends
    // when the kernel does.
    drop(cmd);
    Ok((child, ours))
}

/// Starts the thread that forwards the lines the driver sends on its channel to `events`.
pub fn read_lines(channel: UnixStream, events: Sender<Event>) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("kernel-out".into())
        .spawn(move || {
            let mut reader = BufReader::with_capacity(256 * 1024, channel);
            let mut line = Vec::new();
            loop {
                line.clear();
                match reader.read_until(b'\n', &mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        let text = String::from_utf8_lossy(&line).trim_end().to_string();
                        // The driver starts each message with a newline (kernel.py): blank
                        // lines carry nothing.
                        if text.is_empty() {
                            continue;
                        }
                        if events.send(Event::Line(text)).is_err() {
                            break;
                        }
                    }
                }
            }
            let _ = events.send(Event::Closed);
        })?;
    Ok(())
}

/// Starts the thread that keeps the last [`STDERR_TAIL_BYTES`] of the driver's stderr.
pub fn keep_tail(mut stderr: ChildStderr, tail: Arc<Mutex<Vec<u8>>>) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("kernel-err".into())
        .spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = stderr.read(&mut buf) {
                if n == 0 {
                    break;
                }
                let mut t = super::lock(&tail);
                t.extend_from_slice(&buf[..n]);
                let excess = t.len().saturating_sub(STDERR_TAIL_BYTES);
                t.drain(..excess);
            }
        })?;
    Ok(())
}

/// The last non-empty line of `tail`, at most 300 characters.
pub fn last_line(tail: &[u8]) -> String {
    let text = String::from_utf8_lossy(tail);
    let line = text
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    line.chars().take(300).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_line_of_tail() {
        assert_eq!(
            last_line(b"Traceback...\nModuleNotFoundError: x\n\n"),
            "ModuleNotFoundError: x"
        );
        assert_eq!(last_line(b""), "");
    }
}
