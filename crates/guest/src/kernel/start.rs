//! `KernelStart`: launch `kernel.py` and wait until it accepts code.

use super::process::{self, Event};
use super::wire::{Ready, DRIVER};
use super::{lock, now_ms, worker, Kernel, Status};
use crate::dispatch::Ctx;
use crate::error::OpError;
use crate::exec::kill_group;
use pandastack_guest_protocol::{GuestMsg, RequestId};
use std::collections::BTreeMap;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long a kernel may take to print its ready line (importing IPython under gVisor), ms.
pub const START_TIMEOUT_MS: u64 = 60_000;

/// Starts kernel `kernel_id` and replies `KernelStarted` for `id`.
///
/// # Errors
/// `Invalid` for a language other than `python` or a live kernel of that id; `Kernel` when the
/// driver is missing, python3 cannot start, or the driver dies or hangs before its ready line.
pub fn start(
    ctx: &Ctx,
    id: RequestId,
    kernel_id: &str,
    language: &str,
    env: BTreeMap<String, String>,
) -> Result<(), OpError> {
    if language != "python" {
        return Err(OpError::invalid(format!(
            "language {language:?} is not supported (only python)"
        )));
    }
    if ctx
        .kernels
        .get(kernel_id)
        .is_some_and(|k| k.dead().is_none())
    {
        return Err(OpError::invalid(format!(
            "kernel {kernel_id} already exists"
        )));
    }
    let driver = ctx.config.guest_dir.join(DRIVER);
    if !driver.is_file() {
        return Err(OpError::kernel(format!(
            "kernel driver {} is missing",
            driver.display()
        )));
    }
    let status = Arc::new(Mutex::new(Status {
        dead: None,
        last_used_ms: now_ms(),
    }));
    let (events_tx, events) = mpsc::channel();
    let s = Arc::clone(&status);
    let on_exit = Box::new(move |status| {
        let why = format!(
            "kernel died (exit code {})",
            crate::reaper::exit_code(status)
        );
        lock(&s).dead.get_or_insert(why);
    });
    let (mut child, channel) = process::spawn(
        &ctx.reaper,
        &ctx.config,
        &driver,
        &env,
        events_tx.clone(),
        on_exit,
    )
    .map_err(|e| {
        OpError::kernel(format!(
            "cannot start python3: {}",
            crate::error::reason(&e)
        ))
    })?;
    let pid = child.id();
    let started = std::time::Instant::now();
    let stderr_tail = Arc::new(Mutex::new(Vec::new()));
    let attached = match (channel.try_clone(), child.stderr.take()) {
        (Ok(reader), Some(stderr)) => process::read_lines(reader, events_tx)
            .and_then(|()| process::keep_tail(stderr, Arc::clone(&stderr_tail)))
            .map(|()| channel),
        (Err(e), _) => Err(e),
        (_, None) => Err(std::io::Error::other("kernel stderr pipe missing")),
    };
    let channel = match attached {
        Ok(channel) => channel,
        Err(e) => {
            kill_group(pid as i32);
            return Err(OpError::kernel(format!("cannot attach to kernel: {e}")));
        }
    };
    if let Err(e) = wait_ready(&events, &stderr_tail) {
        kill_group(pid as i32);
        return Err(e);
    }
    let (jobs_tx, jobs) = mpsc::channel();
    let kernel = Arc::new(Kernel {
        kernel_id: kernel_id.to_string(),
        language: language.to_string(),
        pid,
        started,
        jobs: Mutex::new(Some(jobs_tx)),
        status,
        stderr_tail,
    });
    if !ctx.kernels.insert_if_free(Arc::clone(&kernel)) {
        kill_group(pid as i32);
        return Err(OpError::invalid(format!(
            "kernel {kernel_id} already exists"
        )));
    }
    let (out, memory, k) = (ctx.out.clone(), ctx.memory.clone(), Arc::clone(&kernel));
    let spawned = std::thread::Builder::new()
        .name("kernel".into())
        .spawn(move || worker::serve(&out, &memory, &k, channel, &events, jobs));
    if let Err(e) = spawned {
        kernel.mark_dead(format!("kernel worker failed to start: {e}"));
        kill_group(pid as i32);
        return Err(OpError::kernel(format!("cannot start kernel worker: {e}")));
    }
    ctx.out.send(&GuestMsg::KernelStarted {
        id,
        kernel_id: kernel_id.to_string(),
        pid,
    });
    Ok(())
}

/// Waits for the driver's ready line.
fn wait_ready(events: &Receiver<Event>, tail: &Mutex<Vec<u8>>) -> Result<(), OpError> {
    let timeout = Duration::from_millis(START_TIMEOUT_MS);
    match events.recv_timeout(timeout) {
        Ok(Event::Line(line)) => match serde_json::from_str::<Ready>(&line) {
            Ok(r) if r.ready => Ok(()),
            _ => Err(OpError::kernel(format!(
                "kernel sent {:?} instead of ready",
                truncate(&line)
            ))),
        },
        Ok(Event::Closed) | Ok(Event::Exited(_)) | Err(RecvTimeoutError::Disconnected) => {
            // Let the stderr thread catch the traceback before quoting it.
            std::thread::sleep(Duration::from_millis(100));
            let why = process::last_line(&lock(tail));
            Err(OpError::kernel(format!(
                "kernel exited during start: {why}"
            )))
        }
        Err(RecvTimeoutError::Timeout) => Err(OpError::kernel(format!(
            "kernel did not start within {START_TIMEOUT_MS} ms"
        ))),
    }
}

fn truncate(s: &str) -> String {
    s.chars().take(200).collect()
}
