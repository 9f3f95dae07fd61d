//! The per-kernel worker: runs queued cells one at a time.
//!
//! At a run's `timeout_ms` the kernel gets SIGINT (KeyboardInterrupt inside the cell; the
//! kernel keeps its state) and the run reports `timed_out`. If no reply comes
//! [`INTERRUPT_GRACE_MS`] later, the kernel's process group is killed and the run, and every
//! later one, answers `Error{Kernel}`. A kernel the memory guard killed answers its run with
//! `Error{OutOfMemory}` (the host then starts a fresh kernel under the same id).

use super::process::Event;
use super::wire::{CellDone, RunCell};
use super::{Job, Kernel};
use crate::channel::Out;
use crate::error::OpError;
use crate::exec::kill_group;
use crate::memory::MemoryGuard;
use crate::reaper::exit_code;
use pandastack_guest_protocol::{ErrorCode, Execution, GuestMsg};
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// How long an interrupted kernel has to answer before it is killed, ms.
pub const INTERRUPT_GRACE_MS: u64 = 2000;

/// Serves `jobs` until the queue is closed (kernel stopped and all queued runs answered).
pub fn serve(
    out: &Out,
    memory: &MemoryGuard,
    kernel: &Kernel,
    mut channel: UnixStream,
    events: &Receiver<Event>,
    jobs: Receiver<Job>,
) {
    let mut seq = 0;
    for job in jobs {
        seq += 1;
        let result = match kernel.dead() {
            Some(why) => Err(OpError::kernel(why)),
            None => run_cell(kernel, &mut channel, events, seq, &job)
                .map_err(|e| out_of_memory(memory, kernel).unwrap_or(e)),
        };
        kernel.touch();
        match result {
            Ok(execution) => out.send(&GuestMsg::KernelResult {
                id: job.id,
                execution,
            }),
            Err(e) => out.error(job.id, e.code, &e.message),
        }
    }
}

fn run_cell(
    kernel: &Kernel,
    channel: &mut UnixStream,
    events: &Receiver<Event>,
    seq: u64,
    job: &Job,
) -> Result<Execution, OpError> {
    let nonce = super::wire::nonce();
    let mut line = serde_json::to_vec(&RunCell {
        seq,
        nonce: &nonce,
        code: &job.code,
    })
    .map_err(|e| OpError::invalid(format!("cannot encode cell: {e}")))?;
    line.push(b'\n');
    if channel
        .write_all(&line)
        .and_then(|()| channel.flush())
        .is_err()
    {
        return Err(died(kernel, events, None));
    }
    let deadline = job
        .timeout_ms
        .map(|ms| Instant::now() + Duration::from_millis(ms));
    let mut interrupted_at: Option<Instant> = None;
    let mut dropped = false;
    loop {
        let until = match interrupted_at {
            Some(at) => Some(at + Duration::from_millis(INTERRUPT_GRACE_MS)),
            None => deadline,
        };
        let event = match until {
            Some(t) => events.recv_timeout(t.saturating_duration_since(Instant::now())),
            None => events.recv().map_err(|_| RecvTimeoutError::Disconnected),
        };
        match event {
            Ok(Event::Line(text)) => match serde_json::from_str::<CellDone>(&text) {
                Ok(done) if done.seq == Some(seq) && done.nonce.as_deref() == Some(&nonce) => {
                    return Ok(finish(done, interrupted_at.is_some(), job))
                }
                // A stale reply of an interrupted run, or a line written into the channel by
                // code the kernel runs: never a result.
                Ok(_) => {
                    if !dropped {
                        // Once per run: a cell must not be able to flood the log.
                        glog!(
                            "kernel {}: dropped a reply without this run's token",
                            kernel.kernel_id
                        );
                        dropped = true;
                    }
                    continue;
                }
                Err(_) => continue,
            },
            Ok(Event::Exited(status)) => return Err(died(kernel, events, Some(status))),
            Ok(Event::Closed) | Err(RecvTimeoutError::Disconnected) => {
                return Err(died(kernel, events, None))
            }
            Err(RecvTimeoutError::Timeout) if interrupted_at.is_none() => {
                // SAFETY: kill takes plain integers.
                unsafe {
                    libc::kill(kernel.pid as i32, libc::SIGINT);
                }
                interrupted_at = Some(Instant::now());
            }
            Err(RecvTimeoutError::Timeout) => {
                kill_group(kernel.pid as i32);
                let ms = job.timeout_ms.unwrap_or(0);
                let why = format!(
                    "kernel died: killed after no reply {INTERRUPT_GRACE_MS} ms past the interrupt at its {ms} ms timeout"
                );
                return Err(OpError::kernel(kernel.mark_dead(why)));
            }
        }
    }
}

/// The execution for `done`; an interrupted run is marked timed out with a `TimeoutError`.
fn finish(done: CellDone, interrupted: bool, job: &Job) -> Execution {
    let mut execution = done.into_execution();
    if interrupted && execution.error.is_some() {
        let ms = job.timeout_ms.unwrap_or(0);
        let tb = execution.error.take().unwrap_or_default();
        execution.error = Some(format!(
            "{}\nTimeoutError: execution exceeded {ms} ms",
            tb.trim_end()
        ));
        execution.exit_code = 1;
        execution.timed_out = true;
    }
    execution
}

/// The error for a run whose kernel the memory guard killed (and marks the kernel dead with
/// it), or None when it was not killed by the guard.
fn out_of_memory(memory: &MemoryGuard, kernel: &Kernel) -> Option<OpError> {
    let kill = memory.killed_soon(kernel.pid as i32, kernel.started)?;
    let why = format!(
        "kernel killed: the sandbox ran out of memory (the kernel held {} MiB when {} of its {} MiB were in use)",
        kill.rss_bytes >> 20,
        kill.used_bytes >> 20,
        kill.limit_bytes >> 20
    );
    super::lock(&kernel.status).dead = Some(why.clone());
    Some(OpError::new(ErrorCode::OutOfMemory, why))
}

/// Marks the kernel dead and returns the error; waits briefly for the exit status when only
/// the pipe closed.
fn died(kernel: &Kernel, events: &Receiver<Event>, status: Option<i32>) -> OpError {
    let status = status.or_else(|| loop {
        match events.recv_timeout(Duration::from_millis(500)) {
            Ok(Event::Exited(s)) => break Some(s),
            Ok(_) => continue,
            Err(_) => break None,
        }
    });
    let mut why = match status {
        Some(s) => format!("kernel died (exit code {})", exit_code(s)),
        None => "kernel died".to_string(),
    };
    let last = kernel.last_stderr_line();
    if !last.is_empty() {
        why = format!("{why}: {last}");
    }
    // A reason recorded earlier (stopped, killed) wins over the generic one.
    let recorded = kernel.dead().filter(|r| !r.starts_with("kernel died"));
    OpError::kernel(match recorded {
        Some(r) => r,
        None => {
            super::lock(&kernel.status).dead = Some(why.clone());
            why
        }
    })
}
