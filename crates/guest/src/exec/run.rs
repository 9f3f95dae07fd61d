//! The exec worker: waits for the main process to exit and both pipes to reach end of stream,
//! enforcing the timeout, then sends `Exited`.
//!
//! A background grandchild may keep the pipes open forever, so after the main process exits
//! the worker waits at most [`PIPE_GRACE_MS`] more for them. At `timeout_ms` the whole process
//! group is killed and the exec reports `timed_out`.

use super::output::{self, Shared};
use super::spawn::{spawn, Spawned};
use super::{kill_group, Request};
use crate::dispatch::Ctx;
use crate::error::OpError;
use crate::reaper::{exit_code, OnExit};
use pandastack_guest_protocol::{ErrorCode, GuestMsg, OutputStream, RequestId};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long to wait for the pipes after the main process exited, ms.
pub const PIPE_GRACE_MS: u64 = 100;

/// Spawns exec `id` and starts its worker thread.
pub fn start(ctx: &Ctx, id: RequestId, req: Request) -> Result<(), OpError> {
    let started = Instant::now();
    let shared = Arc::new(Shared::default());
    let on_exit = || -> OnExit {
        let s = Arc::clone(&shared);
        Box::new(move |status| {
            s.progress().status = Some(status);
            s.changed.notify_all();
        })
    };
    let mut child = match spawn(
        &ctx.reaper,
        &ctx.config.env,
        &ctx.config.cwd,
        &req,
        &on_exit,
    )? {
        Spawned::Running(child) => child,
        Spawned::Failed { exit_code, stderr } => {
            ctx.out.send_with(
                &GuestMsg::Output {
                    id,
                    stream: OutputStream::Stderr,
                },
                stderr.into_bytes(),
            );
            let duration_ms = started.elapsed().as_millis() as u64;
            ctx.out.send(&GuestMsg::Exited {
                id,
                exit_code,
                timed_out: false,
                duration_ms,
            });
            return Ok(());
        }
    };
    let pgid = child.id() as i32;
    ctx.execs.insert(id, pgid);
    shared.progress().open_pipes = 2;
    let pipes =
        [
            child.stdout.take().map(|p| {
                output::forward(ctx.out.clone(), shared.clone(), id, OutputStream::Stdout, p)
            }),
            child.stderr.take().map(|p| {
                output::forward(ctx.out.clone(), shared.clone(), id, OutputStream::Stderr, p)
            }),
        ];
    for pipe in pipes {
        if !matches!(pipe, Some(Ok(()))) {
            shared.progress().open_pipes -= 1;
        }
    }
    let c = ctx.clone();
    let deadline = req.timeout_ms.map(|ms| started + Duration::from_millis(ms));
    let worker = std::thread::Builder::new().spawn(move || {
        let (status, timed_out) = wait(&shared, pgid, deadline);
        c.execs.remove(id);
        let closed = shared.gate();
        let exit_code = status.map(exit_code).unwrap_or(-1);
        let duration_ms = started.elapsed().as_millis() as u64;
        c.out.send(&GuestMsg::Exited {
            id,
            exit_code,
            timed_out,
            duration_ms,
        });
        drop(closed);
    });
    if let Err(e) = worker {
        kill_group(pgid);
        ctx.execs.remove(id);
        return Err(OpError::new(
            ErrorCode::Io,
            format!("cannot start exec worker: {e}"),
        ));
    }
    // Dropping `child` neither waits nor kills; the reaper owns its status.
    drop(child);
    Ok(())
}

/// Waits for exit + pipes (or exit + grace), killing the group at `deadline`. Returns the raw
/// wait status and whether the timeout fired.
fn wait(shared: &Shared, pgid: i32, deadline: Option<Instant>) -> (Option<i32>, bool) {
    let mut timed_out = false;
    let mut exited_at: Option<Instant> = None;
    let mut progress = shared.progress();
    loop {
        let now = Instant::now();
        if progress.status.is_some() {
            let at = *exited_at.get_or_insert(now);
            if progress.open_pipes == 0 || now >= at + Duration::from_millis(PIPE_GRACE_MS) {
                return (progress.status, timed_out);
            }
        }
        if !timed_out && deadline.is_some_and(|d| now >= d) {
            kill_group(pgid);
            timed_out = true;
            continue;
        }
        let grace_end = exited_at.map(|at| at + Duration::from_millis(PIPE_GRACE_MS));
        let timeout_end = deadline.filter(|_| !timed_out);
        let wake = match (grace_end, timeout_end) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        progress = match wake {
            Some(w) => match shared
                .changed
                .wait_timeout(progress, w.saturating_duration_since(now))
            {
                Ok((p, _)) => p,
                Err(poisoned) => poisoned.into_inner().0,
            },
            None => match shared.changed.wait(progress) {
                Ok(p) => p,
                Err(poisoned) => poisoned.into_inner(),
            },
        };
    }
}
